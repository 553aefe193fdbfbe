#!/usr/bin/env python3
"""The figures of scripts/bench: parses each run's raw output into JSON (`record`) and
writes the report with summary.json (`report`). Standard library only.

    bench_report.py record --dir D --kind wrk|pgbench|redis --name N [...]
        reads D/raw/N.txt (and D/metrics/N.{before,after}.prom for wrk), writes D/N.json,
        prints the run's requests per second; fails when the output holds no number.
    bench_report.py report --dir D --out FILE [...]
        writes FILE and D/summary.json; exits 1 when a figure is missing or a run that
        must answer without errors did not.
"""

import argparse
import csv
import datetime
import glob
import io
import json
import math
import os
import platform
import re
import subprocess
import sys

# The runs of the report, in order: (name, what it measures).
THROUGHPUT_RUNS = [
    ("segmint-nextIdSimple", "Tinyid route, token in the query, 1 ID per request"),
    ("segmint-v1", "JSON API, `Authorization: Bearer`, 1 ID per request"),
    ("segmint-snowflake", "JSON API, 1 snowflake ID per request (`/v1/snowflake`), no segment"),
    ("segmint-v1-batch", "JSON API, 1000 IDs per request"),
    ("segmint-healthz", "the HTTP framework's ceiling: a constant 200, no ID"),
    ("pg-nextval", "`SELECT nextval('s')`, prepared, one ID per transaction"),
    ("pg-hot-row", "`UPDATE tiny_id_info SET max_id = max_id + 1 WHERE biz_type = 'x' RETURNING max_id` per ID"),
    ("redis-incr", "`INCR` of one key, no pipelining"),
    ("redis-incr-p16", "`INCR` of one key, 16 commands per round trip"),
]
# The runs measured in alternating rounds (NAME.round-1.json, NAME.round-2.json, …): the
# report shows the median round of each, by requests/s, and lists every round.
ROUND_RUNS = ("segmint-nextIdSimple", "segmint-v1", "segmint-snowflake", "segmint-healthz",
              "redis-incr")
LATENCY_RUNS = [
    ("latency-undisturbed", "undisturbed"),
    ("latency-stalled", "one database stalled"),
    ("latency-stopped", "one database stopped"),
    ("latency-healthz", "/healthz (no ID) at the same pause, undisturbed"),
]


def die(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(1)


def number(x):
    """x when it is a finite positive number, else None."""
    if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0:
        return x
    return None


# --- parsing ------------------------------------------------------------------------


def parse_wrk(text):
    for line in text.splitlines():
        if line.startswith("WRK_JSON "):
            d = json.loads(line[len("WRK_JSON "):])
            secs = d["duration_us"] / 1e6
            lat = {k: v / 1000 for k, v in d["latency_us"].items()}
            return {
                "requests": d["requests"],
                "elapsed_s": secs,
                "rps": d["requests"] / secs if secs > 0 else None,
                "bytes": d["bytes"],
                "latency_ms": lat,
                "errors": d["errors"],
            }
    return None


def parse_pgbench(text):
    tps = re.search(r"^tps = ([0-9.]+) \(without initial connection time\)", text, re.M)
    if not tps:
        return None
    avg = re.search(r"^latency average = ([0-9.]+) ms", text, re.M)
    done = re.search(r"^number of transactions actually processed: (\d+)", text, re.M)
    failed = re.search(r"^number of failed transactions: (\d+)", text, re.M)
    return {
        "rps": float(tps.group(1)),
        "requests": int(done.group(1)) if done else None,
        "failed": int(failed.group(1)) if failed else 0,
        "latency_ms": {"mean": float(avg.group(1))} if avg else {},
    }


def parse_redis(text):
    rows = list(csv.reader(io.StringIO(text)))
    header = next((r for r in rows if r and r[0] == "test"), None)
    row = next((r for r in rows if r and r[0] == "INCR"), None)
    if not header or not row:
        return None
    d = dict(zip(header, row))
    names = {"avg_latency_ms": "mean", "min_latency_ms": "min", "p50_latency_ms": "p50",
             "p95_latency_ms": "p95", "p99_latency_ms": "p99", "max_latency_ms": "max"}
    return {
        "rps": float(d["rps"]),
        "latency_ms": {names[k]: float(v) for k, v in d.items() if k in names},
    }


LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
# A sample line; label values may hold `}` (route templates such as `/v1/ids/{biz}`).
SAMPLE = re.compile(r'^(\w+)(\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\})?\s+(\S+)')


def parse_metrics(path):
    """Prometheus text format in a file: {(name, ((label, value), ...)): value}."""
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return parse_metrics_text(f.read())


def parse_metrics_text(text):
    """Prometheus text format: {(name, ((label, value), ...)): value}."""
    samples = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if not m:
            continue
        labels = tuple(sorted(LABEL.findall(m.group(2) or "")))
        try:
            samples[(m.group(1), labels)] = float(m.group(3))
        except ValueError:
            pass
    return samples


def metrics_delta(before, after, name):
    """[(labels dict, increase)] of counter `name` between two scrapes."""
    out = []
    for (n, labels), value in after.items():
        if n == name:
            inc = value - before.get((n, labels), 0.0)
            if inc:
                out.append((dict(labels), inc))
    return out


def cpu_seconds(path):
    """(user, system) CPU seconds of a process from a copy of its /proc/PID/stat."""
    try:
        with open(path) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    # Fields 14 and 15 of the file (utime, stime); the split starts at field 3.
    return int(fields[11]) / tick, int(fields[12]) / tick


def context_switches(path):
    """(voluntary, involuntary) context switches summed over a process's threads, from
    the ctxt_switches lines of its /proc/PID/task/*/status files."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    counts = {"voluntary_ctxt_switches:": 0, "nonvoluntary_ctxt_switches:": 0}
    for line in lines:
        fields = line.split()
        if len(fields) == 2 and fields[0] in counts:
            counts[fields[0]] += int(fields[1])
    return counts["voluntary_ctxt_switches:"], counts["nonvoluntary_ctxt_switches:"]


def server_cpu(directory, name, requests):
    """The server's CPU time during a run, and per request, from the snapshots taken
    before and after it."""
    before = cpu_seconds(os.path.join(directory, "metrics", f"{name}.before.stat"))
    after = cpu_seconds(os.path.join(directory, "metrics", f"{name}.after.stat"))
    if before is None or after is None or not requests:
        return None
    user, system = after[0] - before[0], after[1] - before[1]
    cpu = {"user_s": round(user, 2), "system_s": round(system, 2),
           "us_per_request": (user + system) * 1e6 / requests,
           "user_us_per_request": user * 1e6 / requests}
    switches_before = context_switches(os.path.join(directory, "metrics", f"{name}.before.ctxt"))
    switches_after = context_switches(os.path.join(directory, "metrics", f"{name}.after.ctxt"))
    if switches_before is not None and switches_after is not None:
        # A thread that exits during the run takes its count along: never below zero.
        cpu["voluntary_switches_per_request"] = max(
            0, switches_after[0] - switches_before[0]) / requests
        cpu["involuntary_switches_per_request"] = max(
            0, switches_after[1] - switches_before[1]) / requests
    return cpu


def client_cpu(directory, name, requests):
    """The load generator's CPU time during a run, and per request, from the real, user
    and system seconds that bash's `time` wrote for it (scripts/bench's `timed`)."""
    try:
        with open(os.path.join(directory, "metrics", f"{name}.client")) as f:
            _, user, system = (float(x) for x in f.read().split()[-3:])
    except (OSError, ValueError):
        return None
    if not requests:
        return None
    return {"user_s": round(user, 2), "system_s": round(system, 2),
            "us_per_request": (user + system) * 1e6 / requests,
            "user_us_per_request": user * 1e6 / requests}


def server_side(directory, name):
    before = parse_metrics(os.path.join(directory, "metrics", f"{name}.before.prom"))
    after = parse_metrics(os.path.join(directory, "metrics", f"{name}.after.prom"))
    if not after:
        return None
    responses = {}
    for labels, inc in metrics_delta(before, after, "segmint_http_requests_total"):
        if labels.get("route") == "/metrics":
            continue
        key = f'{labels.get("method", "?")} {labels.get("route", "?")} {labels.get("status", "?")}'
        responses[key] = int(inc)
    fetches = {}
    for labels, inc in metrics_delta(before, after, "segmint_segment_fetches_total"):
        fetches.setdefault(labels.get("database", "?"), {})[labels.get("outcome", "?")] = int(inc)
    # IDs from the cache and snowflake IDs alike.
    issued = sum(inc for name in ("segmint_ids_issued_total", "segmint_snowflake_ids_total")
                 for _, inc in metrics_delta(before, after, name))
    waits = sum(inc for _, inc in metrics_delta(before, after, "segmint_cache_waits_total"))
    return {"ids_issued": int(issued), "cache_waits": int(waits), "responses": responses,
            "segment_fetches": fetches,
            "fetch_time": fetch_time(before, after)}


def fetch_time(before, after):
    """Per database: the segment fetches' mean time and the bucket bound holding the
    slowest, from the histogram's increase between two scrapes."""
    name = "segmint_segment_fetch_duration_seconds"
    out = {}
    counts = {l["database"]: n for l, n in metrics_delta(before, after, f"{name}_count") if "database" in l}
    sums = {l["database"]: s for l, s in metrics_delta(before, after, f"{name}_sum") if "database" in l}
    buckets = {}
    for labels, inc in metrics_delta(before, after, f"{name}_bucket"):
        buckets.setdefault(labels.get("database"), []).append((float(labels["le"]), inc))
    for db, n in counts.items():
        slowest = min((le for le, c in buckets.get(db, []) if c >= n), default=None)
        out[db] = {"count": int(n), "mean_ms": sums.get(db, 0.0) / n * 1000,
                   "slowest_at_most_ms": None if slowest is None or math.isinf(slowest) else slowest * 1000}
    return out


# --- record -------------------------------------------------------------------------


def record(args):
    raw_path = os.path.join(args.dir, "raw", f"{args.name}.txt")
    try:
        with open(raw_path, errors="replace") as f:
            text = f.read()
    except OSError as e:
        die(f"{args.name}: {e}")
    parsed = {"wrk": parse_wrk, "pgbench": parse_pgbench, "redis": parse_redis}[args.kind](text)
    run = {
        "name": args.name,
        "kind": args.kind,
        "title": args.title,
        "command": args.command,
        "connections": args.connections,
        "threads": args.threads,
        "duration_s": args.duration,
        "raw": os.path.relpath(raw_path, args.dir),
        "strict": args.strict,
    }
    # Problems are wrong answers (they invalidate a run that must answer without errors);
    # notes are worth knowing but leave the answers, and so the figures, intact.
    problems, notes = [], []
    if parsed:
        run.update(parsed)
    if args.kind == "wrk":
        run["ids_per_request"] = args.ids_per_request
        if number(run.get("rps")) is not None:
            run["ids_per_s"] = run["rps"] * args.ids_per_request
        if args.target_rps is not None:
            run.update(target_rps=args.target_rps, delay_ms=args.delay_ms,
                       disturbance=args.disturbance, description=args.description,
                       recovery_s=args.recovery_s)
        server = server_side(args.dir, args.name)
        if server is not None:
            run["server"] = server
            # The run's time window, to place segmint's log lines.
            run["window"] = [os.path.getmtime(os.path.join(args.dir, "metrics", f"{args.name}.{w}.prom"))
                             for w in ("before", "after")]
        problems += wrk_problems(run, server, args)
        notes += wrk_notes(run, server, args)
    elif args.kind in ("pgbench", "redis"):
        if args.requests is not None:
            run["requests"] = args.requests
        run["ids_per_request"] = 1
        if number(run.get("rps")) is not None:
            run["ids_per_s"] = run["rps"]
        if run.get("failed"):
            problems.append(f"{run['failed']} failed transactions")
    cpu = server_cpu(args.dir, args.name, run.get("requests"))
    if cpu is not None:
        run["server_cpu"] = cpu
    load = client_cpu(args.dir, args.name, run.get("requests"))
    if load is not None:
        run["client_cpu"] = load
    run["problems"] = problems
    run["notes"] = notes
    headline = number(run.get("rps"))
    run["valid"] = headline is not None and not (args.strict and problems)
    with open(os.path.join(args.dir, f"{args.name}.json"), "w") as f:
        json.dump(run, f, indent=2)
        f.write("\n")
    for p in problems + notes:
        print(f"warning: {args.name}: {p}", file=sys.stderr)
    if headline is None:
        die(f"{args.name}: no requests/s in the output; see {raw_path}")
    print(f"{headline:.3f}")


def wrk_problems(run, server, args):
    problems = []
    errors = run.get("errors") or {}
    socket = {k: v for k, v in errors.items() if k != "status" and v}
    if socket:
        problems.append("wrk socket errors: " + ", ".join(f"{k} {v}" for k, v in socket.items()))
    if errors.get("status"):
        problems.append(f"{errors['status']} responses with status 4xx/5xx (wrk)")
    if server is None:
        return problems
    bad = {k: v for k, v in server["responses"].items() if not k.split()[-1].startswith("2")}
    if bad:
        problems.append("non-2xx responses (server): " + ", ".join(f"{k}: {v}" for k, v in bad.items()))
    requests = run.get("requests") or 0
    expected = requests * args.ids_per_request
    if server["ids_issued"] < expected:
        problems.append(
            f"the server issued {server['ids_issued']} IDs for {requests} answered requests "
            f"of {args.ids_per_request} IDs: some answers carried no IDs")
    return problems


def wrk_notes(run, server, args):
    notes = []
    if server and args.disturbance in (None, "none"):
        errs = {db: o.get("error", 0) for db, o in server["segment_fetches"].items() if o.get("error")}
        if errs:
            notes.append("segment fetches that failed without any disturbance (see "
                         "target/bench/logs/segmint.log): " + ", ".join(f"{db}: {n}" for db, n in errs.items()))
    if args.recovery_s is not None and args.recovery_s < 0:
        notes.append("the databases were not both up in /readyz 30 s after the run")
    return notes


# --- report -------------------------------------------------------------------------


def run_text(cmd):
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else None


def machine(args, exclude=("BENCHMARKS.md",)):
    """The machine, the commit and the tools' versions. The commit is marked as having
    uncommitted changes when any tracked file but the reports `exclude` differs."""
    info = {}
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    m = re.search(r"^Model name:\s*(.+)$", lscpu, re.M)
    info["cpu"] = m.group(1).strip() if m else platform.processor() or "unknown"
    m = re.search(r"^Hypervisor vendor:\s*(.+)$", lscpu, re.M)
    if m:
        info["cpu"] += f" (virtual machine, {m.group(1).strip()})"
    info["cores"] = os.cpu_count()
    with open("/proc/meminfo") as f:
        m = re.search(r"^MemTotal:\s*(\d+) kB", f.read(), re.M)
    info["ram_gib"] = round(int(m.group(1)) / 1024 / 1024, 1) if m else None
    info["kernel"] = platform.release()
    try:
        with open("/etc/os-release") as f:
            m = re.search(r'^PRETTY_NAME="?([^"\n]*)', f.read(), re.M)
        info["os"] = m.group(1) if m else None
    except OSError:
        info["os"] = None
    info["date"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    commit = run_text(["git", "-C", args.repo, "rev-parse", "HEAD"])
    if commit and re.fullmatch(r"[0-9a-f]{40}", commit):
        # --no-optional-locks: reading the status must not rewrite the index. The report
        # of an earlier run is no change to what is measured.
        status = subprocess.run(
            ["git", "--no-optional-locks", "-C", args.repo, "status", "--porcelain",
             "--untracked-files=no", "--", "."] + [f":!{path}" for path in exclude],
            capture_output=True, text=True).stdout
        info["commit"] = commit + (" (with uncommitted changes)" if status.strip() else "")
    else:
        info["commit"] = "unknown (not a git checkout)"
    info["versions"] = {
        "segmint": run_text([args.segmint, "--version"]),
        "PostgreSQL": run_text([os.path.join(args.pg_bin, "postgres"), "--version"]),
        "pgbench": run_text([args.pgbench, "--version"]),
        "redis-server": run_text(["redis-server", "--version"]),
        "redis-benchmark": run_text(["redis-benchmark", "--version"]),
        "wrk": run_text(["wrk", "-v"]),
    }
    return info


def criterion(directory):
    rows = []
    for est in sorted(glob.glob(os.path.join(directory, "**", "new", "estimates.json"), recursive=True)):
        new = os.path.dirname(est)
        try:
            with open(est) as f:
                mean = json.load(f)["mean"]["point_estimate"]
            with open(os.path.join(new, "benchmark.json")) as f:
                bench = json.load(f)
        except (OSError, ValueError, KeyError):
            continue
        elements = (bench.get("throughput") or {}).get("Elements")
        rows.append({
            "group": bench.get("group_id"),
            "function": bench.get("function_id") or bench.get("full_id"),
            "mean_ns": mean,
            "elements": elements,
            "ns_per_element": mean / elements if elements else None,
            "elements_per_s": elements / mean * 1e9 if elements and mean else None,
            "measured": datetime.datetime.fromtimestamp(os.path.getmtime(est)).strftime("%Y-%m-%d %H:%M"),
        })
    for r in rows:
        base = next((b for b in rows if b["group"] == r["group"] and is_baseline(b["function"])
                     and b["elements"] == r["elements"]), None)
        r["vs_baseline"] = base["mean_ns"] / r["mean_ns"] if base and base is not r and r["mean_ns"] else None
    return rows


def is_baseline(function):
    """A group's reference: a bare atomic counter, or for whole requests the constant
    route."""
    return str(function).startswith("atomic") or function == "healthz"


LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT[\d:.]+)Z\s+(WARN|ERROR)\s+(.*)$")


def log_warnings(path, runs):
    """segmint's warnings and errors, grouped by message (numbers masked), each with
    its count and the runs during which it was logged."""
    groups = {}
    try:
        with open(path, errors="replace") as f:
            lines = f.readlines()
    except OSError:
        return []
    windows = [(name, r["window"]) for name, r in runs.items() if r.get("window")]
    for line in lines:
        m = LOG_LINE.match(line.strip())
        if not m:
            continue
        when = datetime.datetime.fromisoformat(m.group(1)).replace(tzinfo=datetime.timezone.utc).timestamp()
        key = f"{m.group(2)} " + re.sub(r"\d+(\.\d+)?", "#", m.group(3))
        g = groups.setdefault(key, {"message": key, "count": 0, "example": f"{m.group(2)} {m.group(3)}",
                                    "during": set(), "first": m.group(1)})
        g["count"] += 1
        g["during"].add(next((n for n, (a, b) in windows if a <= when <= b), "outside the measured segmint runs"))
    out = sorted(groups.values(), key=lambda g: g["first"])
    for g in out:
        g["during"] = sorted(g["during"])
    return out


def fmt_int(x):
    return "—" if number(x) is None else f"{x:,.0f}"


def fmt_ms(x):
    return "—" if number(x) is None else f"{x:,.3f} ms"


def fmt_ratio(x):
    return "—" if x is None else f"{x:,.2f}"


def ratio(a, b):
    a, b = number(a), number(b)
    return a / b if a is not None and b is not None else None


def errors_text(run):
    if not run:
        return "—"
    if run["kind"] == "wrk":
        errs = run.get("errors") or {}
        bad = sum(v for k, v in (run.get("server") or {}).get("responses", {}).items()
                  if not k.split()[-1].startswith("2"))
        return f"{bad} non-2xx, {sum(v for k, v in errs.items() if k != 'status')} socket"
    if run["kind"] == "pgbench":
        return f"{run.get('failed', 0)} failed"
    return "—"


def cpu_text(run, key="server_cpu"):
    cpu = (run or {}).get(key)
    if not cpu:
        return "—"
    return f"{cpu['us_per_request']:,.2f} µs ({cpu['user_us_per_request']:,.2f})"


def switches_text(run):
    cpu = (run or {}).get("server_cpu") or {}
    if "involuntary_switches_per_request" not in cpu:
        return "—"
    return (f"{cpu['voluntary_switches_per_request']:.3f} / "
            f"{cpu['involuntary_switches_per_request']:.3f}")


def waits_text(run):
    waits = (run.get("server") or {}).get("cache_waits")
    return "—" if waits is None else f"{waits:,}"


def fetches_text(run):
    server = run.get("server") or {}
    fetches = server.get("segment_fetches") or {}
    if not fetches:
        return "none"
    parts = []
    for db, outcomes in sorted(fetches.items()):
        text = f"{db}: " + ", ".join(f"{o} {n}" for o, n in sorted(outcomes.items()))
        time = (server.get("fetch_time") or {}).get(db)
        if time:
            slowest = time["slowest_at_most_ms"]
            text += f" (mean {time['mean_ms']:.1f} ms, " + (
                f"all ≤ {slowest:g} ms)" if slowest is not None else "some over the largest bucket)")
        parts.append(text)
    return "; ".join(parts)


def round_number(path):
    m = re.search(r"\.round-(\d+)\.json$", path)
    return int(m.group(1)) if m else 0


def median_round(rounds):
    """The run of `rounds` (in round order) with the median requests/s (the lower middle
    one for an even count), with every round's rate under `rounds` and the problems of
    every round; valid only when every round is. None without any round."""
    if not rounds:
        return None
    rated = sorted((r for r in rounds if number(r.get("rps")) is not None), key=lambda r: r["rps"])
    middle = rated[(len(rated) - 1) // 2] if rated else rounds[0]
    run = dict(middle)
    run["rounds"] = [{k: r.get(k) for k in ("name", "rps", "server_cpu", "client_cpu")} for r in rounds]
    run["median_of"] = len(rounds)
    run["valid"] = bool(rated) and len(rated) == len(rounds) and all(r.get("valid") for r in rounds)
    run["problems"] = [f"{r['name']}: {p}" for r in rounds for p in r.get("problems", [])]
    run["notes"] = [f"{r['name']}: {p}" for r in rounds for p in r.get("notes", [])]
    return run


def load_runs(directory):
    """Every run of the report by name, the rounds of ROUND_RUNS merged into their median
    round; and every run recorded, rounds apart, for placing log lines."""
    runs, recorded = {}, {}
    for name, _ in THROUGHPUT_RUNS + LATENCY_RUNS:
        path = os.path.join(directory, f"{name}.json")
        if os.path.exists(path):
            with open(path) as f:
                runs[name] = recorded[name] = json.load(f)
        elif name in ROUND_RUNS:
            rounds = []
            paths = glob.glob(os.path.join(directory, f"{name}.round-*.json"))
            # Not NAME.round-N.calibration.json, Redis's short first run of a round.
            for round_path in sorted((p for p in paths if round_number(p)), key=round_number):
                with open(round_path) as f:
                    rounds.append(json.load(f))
                recorded[rounds[-1]["name"]] = rounds[-1]
            merged = median_round(rounds)
            if merged is not None:
                runs[name] = merged
    return runs, recorded


def median(values):
    """The median of the figures among `values`; None without any."""
    figures = sorted(v for v in values if number(v) is not None)
    if not figures:
        return None
    half = len(figures) // 2
    return figures[half] if len(figures) % 2 else (figures[half - 1] + figures[half]) / 2


def round_ratios(runs, numerator, denominator):
    """The ratio of two round runs' requests/s within each round, in round order."""
    a = [r["rps"] for r in (runs.get(numerator) or {}).get("rounds", [])]
    b = [r["rps"] for r in (runs.get(denominator) or {}).get("rounds", [])]
    return [ratio(x, y) for x, y in zip(a, b)]


def cpu_need(run, server_user=True):
    """µs of CPU per request of a run's server and load generator together; without the
    server's user time when `server_user` is false. None without both figures."""
    server, client = (run or {}).get("server_cpu"), (run or {}).get("client_cpu")
    if not server or not client:
        return None
    need = server["us_per_request"] + client["us_per_request"]
    return need if server_user else need - server["user_us_per_request"]


def cpu_ceiling(need, cores):
    """The requests/s that `cores` allow when each request needs `need` µs of CPU."""
    return None if not need or not cores else cores * 1e6 / need


def kernel_bound(runs, cores):
    """Within each round: the CPU ceiling of nextIdSimple without segmint's user time (its
    kernel time and wrk's CPU per request only) ÷ Redis INCR's requests/s. The highest
    nextIdSimple ÷ Redis INCR this machine allows, if every instruction segmint, actix-web
    and tokio run per request cost nothing."""
    simple = (runs.get("segmint-nextIdSimple") or {}).get("rounds", [])
    redis = (runs.get("redis-incr") or {}).get("rounds", [])
    return [ratio(cpu_ceiling(cpu_need(a, server_user=False), cores), b.get("rps"))
            for a, b in zip(simple, redis)]


def report(args):
    runs, recorded = load_runs(args.dir)
    missing = []

    def get(name, *keys):
        v = runs.get(name)
        for k in keys:
            v = v.get(k) if isinstance(v, dict) else None
        return v

    for name, _ in THROUGHPUT_RUNS + LATENCY_RUNS:
        if name not in runs:
            missing.append(f"{name}: no result")
        elif number(runs[name].get("rps")) is None:
            missing.append(f"{name}: no requests/s")
        elif not runs[name].get("valid"):
            missing.append(f"{name}: answered with errors ({'; '.join(runs[name]['problems'])})")
    for name, _ in LATENCY_RUNS:
        if name in runs and number(get(name, "latency_ms", "p999")) is None:
            missing.append(f"{name}: no p99.9 latency")

    peak = get("segmint-nextIdSimple", "rps")
    lat = {name: get(name, "latency_ms", "p999") for name, _ in LATENCY_RUNS}

    def paired(numerator, denominator):
        """The median of the two runs' ratios within each round: each pair is measured
        back to back, so a machine that is slower in one round than in another moves
        both sides of that round's ratio. The ratio of the two median rows, which may
        come from different rounds, is in the context table."""
        return median(round_ratios(runs, numerator, denominator))

    ratios = [
        ("segmint nextIdSimple ÷ Redis INCR (no pipelining), requests/s",
         paired("segmint-nextIdSimple", "redis-incr"), ">=", 1.5, ""),
        ("segmint nextIdSimple ÷ segmint /healthz, requests/s",
         paired("segmint-nextIdSimple", "segmint-healthz"), ">=", 0.9, ""),
        ("segmint /v1/ids (1 ID) ÷ segmint /healthz, requests/s",
         paired("segmint-v1", "segmint-healthz"), ">=", 0.9, ""),
        ("segmint batch of 1000, IDs/s ÷ Redis INCR -P 16, IDs/s",
         ratio(get("segmint-v1-batch", "ids_per_s"), get("redis-incr-p16", "ids_per_s")), ">=", 10, ""),
        ("segmint p99.9 at half load", lat["latency-undisturbed"], "<", 1.0, " ms"),
        ("p99.9 with one database stalled ÷ undisturbed",
         ratio(lat["latency-stalled"], lat["latency-undisturbed"]), "<=", 1.2, ""),
        ("p99.9 with one database stopped ÷ undisturbed",
         ratio(lat["latency-stopped"], lat["latency-undisturbed"]), "<=", 1.2, ""),
    ]
    context = [
        ("segmint nextIdSimple ÷ Redis INCR (no pipelining), requests/s: the median rows",
         ratio(peak, get("redis-incr", "rps"))),
        ("segmint nextIdSimple ÷ segmint /healthz, requests/s: the median rows",
         ratio(peak, get("segmint-healthz", "rps"))),
        ("segmint /v1/ids (1 ID) ÷ segmint /healthz, requests/s: the median rows",
         ratio(get("segmint-v1", "rps"), get("segmint-healthz", "rps"))),
        ("segmint /v1/snowflake ÷ segmint /v1/ids (1 ID each), requests/s: within each round",
         paired("segmint-snowflake", "segmint-v1")),
        ("server CPU per request: segmint /v1/snowflake ÷ segmint /v1/ids",
         ratio(get("segmint-snowflake", "server_cpu", "us_per_request"),
               get("segmint-v1", "server_cpu", "us_per_request"))),
        ("segmint nextIdSimple ÷ PostgreSQL nextval, IDs/s", ratio(peak, get("pg-nextval", "rps"))),
        ("segmint nextIdSimple ÷ PostgreSQL hot-row UPDATE, IDs/s", ratio(peak, get("pg-hot-row", "rps"))),
        ("segmint batch of 1000 ÷ segmint nextIdSimple, IDs/s",
         ratio(get("segmint-v1-batch", "ids_per_s"), peak)),
        ("segmint /healthz ÷ Redis INCR (no pipelining), requests/s: the HTTP framework's "
         "ceiling against Redis", ratio(get("segmint-healthz", "rps"), get("redis-incr", "rps"))),
        ("segmint p99.9 at half load ÷ /healthz p99.9 at the same pause",
         ratio(lat["latency-undisturbed"], lat["latency-healthz"])),
        ("server CPU per request: segmint nextIdSimple ÷ segmint /healthz",
         ratio(get("segmint-nextIdSimple", "server_cpu", "us_per_request"),
               get("segmint-healthz", "server_cpu", "us_per_request"))),
        ("server CPU per request: segmint nextIdSimple ÷ redis-server INCR",
         ratio(get("segmint-nextIdSimple", "server_cpu", "us_per_request"),
               get("redis-incr", "server_cpu", "us_per_request"))),
    ]
    ratio_rows = []
    for label, value, op, goal, unit in ratios:
        if value is None:
            missing.append(f"ratio `{label}`: missing")
            verdict = "no figure"
        else:
            ok = {"<": value < goal, "<=": value <= goal, ">=": value >= goal}[op]
            verdict = "met" if ok else "not met"
        ratio_rows.append({"ratio": label, "value": value, "target": f"{op} {goal}{unit}", "verdict": verdict})

    # The request-rate ratios within each round, beside the ratio of the medians above.
    per_round = [
        ("nextIdSimple ÷ Redis INCR", round_ratios(runs, "segmint-nextIdSimple", "redis-incr")),
        ("nextIdSimple ÷ /healthz", round_ratios(runs, "segmint-nextIdSimple", "segmint-healthz")),
        ("/v1/ids ÷ /healthz", round_ratios(runs, "segmint-v1", "segmint-healthz")),
        ("/v1/snowflake ÷ /v1/ids", round_ratios(runs, "segmint-snowflake", "segmint-v1")),
        ("/healthz ÷ Redis INCR", round_ratios(runs, "segmint-healthz", "redis-incr")),
    ]

    info = machine(args)
    bound = kernel_bound(runs, info["cores"])
    if all(b is None for b in bound):
        missing.append("CPU budget: no server and load generator CPU per request of nextIdSimple "
                       "and Redis INCR in any round")
    context.append(("segmint nextIdSimple ÷ Redis INCR, requests/s: the highest this machine "
                    "allows with segmint's user time per request at zero (see CPU budget)",
                    median(bound)))
    crit = criterion(args.criterion)
    warnings = log_warnings(os.path.join(args.dir, "logs", "segmint.log"), recorded)
    problems = [(name, p) for name, _ in THROUGHPUT_RUNS + LATENCY_RUNS
                for p in runs.get(name, {}).get("problems", []) + runs.get(name, {}).get("notes", [])]
    summary = {
        "mode": args.mode, "duration_s": args.duration, "connections": args.connections,
        "threads": args.threads, "elapsed_s": args.elapsed, "machine": info,
        "runs": runs, "ratios": ratio_rows,
        "context_ratios": [{"ratio": l, "value": v} for l, v in context],
        "round_ratios": [{"ratio": l, "values": v} for l, v in per_round],
        "kernel_bound_rounds": bound,
        "criterion": crit, "segmint_log_warnings": warnings, "problems": [f"{n}: {p}" for n, p in problems], "missing": missing,
    }
    with open(os.path.join(args.dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")

    md = render(args, info, runs, ratio_rows, context, per_round, bound, crit, problems, missing,
                warnings)
    with open(args.out, "w") as f:
        f.write(md)
    for m in missing:
        print(f"error: {m}", file=sys.stderr)
    print(f"wrote {args.out} and {os.path.join(args.dir, 'summary.json')}", file=sys.stderr)
    if missing:
        sys.exit(1)


def render(args, info, runs, ratio_rows, context, per_round, bound, crit, problems, missing,
           warnings):
    c, t, d = args.connections, args.threads, args.duration
    out = []
    w = out.append
    title = "segmint benchmarks" + (" (smoke run)" if args.mode == "smoke" else "")
    w(f"# {title}\n")
    w(f"Written by `scripts/bench`{' --smoke' if args.mode == 'smoke' else ''} on {info['date']}: "
      f"every figure below comes from that one run (about {args.elapsed} s, build excluded). "
      "Run it again to refresh them; `scripts/bench --smoke` runs the same pipeline for one "
      "second per run. Raw figures: `target/bench/*.json` (one file per run) and "
      "`target/bench/summary.json`.\n")
    w("How one server copes with many bizs (up to a million: start, CPU and database reads "
      "at rest, memory, the first request of a cold biz, the operator pages, the import) is "
      "measured apart, by `scripts/scale`: see [SCALE.md](SCALE.md).\n")
    if args.mode == "smoke":
        w("**Smoke run:** one second per measurement, so the figures only show that every "
          "measurement works; they are not benchmarks.\n")
    w("The machine is small and was not idle, and the load generators run on the same two "
      "cores as segmint, PostgreSQL and Redis: read every figure, and the ratios built from "
      "them, as a noisy sample. The rounds of the request-rate runs show how far the same "
      "run moves within one invocation.\n")

    w("## Machine\n")
    w("| | |\n| --- | --- |")
    w(f"| CPU | {info['cpu']} |")
    w(f"| cores | {info['cores']} |")
    w(f"| RAM | {info['ram_gib']} GiB |")
    w(f"| kernel | Linux {info['kernel']}{' (' + info['os'] + ')' if info.get('os') else ''} |")
    w(f"| date | {info['date']} |")
    w(f"| segmint commit | `{info['commit']}` |")
    for k, v in info["versions"].items():
        w(f"| {k} | {v or 'unknown'} |")
    w("")

    w("## Method\n")
    w(f"- **Same load everywhere.** Every HTTP and TCP run uses {c} connections and {t} client "
      f"threads: `wrk -t{t} -c{c}`, `pgbench -c {c} -j {t}`, `redis-benchmark -c {c} --threads {t}`, "
      f"for {d} s each (redis-benchmark takes a request count: a short first run gives the rate, "
      f"and the measured run gets {d} s worth of requests). Everything runs on this machine over "
      "loopback; the segmint runs follow a warm-up.")
    rounds = max((len(runs.get(n, {}).get("rounds", [])) for n in ROUND_RUNS), default=0)
    w(f"- **Alternating rounds.** The runs the request-rate targets compare (segmint nextIdSimple, "
      f"/v1/ids with 1 ID, /v1/snowflake, /healthz, and Redis INCR) run in {rounds} rounds, one after "
      "another in each round, so that a slow stretch of the machine falls on all of them rather "
      "than on one. Each of their rows below is the round with the median requests/s (every "
      "figure of the row from that round); every round's rate is listed under the table. The "
      "request-rate ratios of the targets are the median of the ratios within each round, "
      "whose two runs were measured back to back, listed under the ratios; the ratios of "
      "the median rows, which may come from different rounds, are in the context table.")
    w("- **segmint** is the release build with the configuration below: two throwaway "
      "PostgreSQL clusters (initdb defaults, so `fsync` and `synchronous_commit` on), even IDs "
      "from one and odd IDs from the other, every key at its default (one HTTP worker per core, "
      "8 connections per database) except `adaptive_step = false`. The biz `bench` has step "
      "1,000,000, which is also what the adaptive step would choose for it, so a segment "
      "fetch is rare; the adaptive step is off so that the latency biz below keeps its small "
      "step.")
    w("- **Latencies** of the wrk runs are wrk's own, from sending a request to its whole "
      "response, as percentiles of wrk's histogram reported by a `done()` hook of the lua script "
      "(`target/bench/bench.lua`). Errors: wrk's socket errors and its count of 4xx/5xx "
      "answers, and, from segmint's `/metrics` before and after each run, the answers by "
      "status and the IDs issued — the Tinyid `Simple` route reports errors with status 200 "
      "and an empty body, so every run also checks that segmint issued at least one ID per "
      "answered request (times the batch size).")
    w("- **PostgreSQL baselines** run in a database `bench` of one of the two clusters while "
      "segmint is idle: a sequence, and a table created by segmint's own schema "
      "(`sql/postgres/0001_init.sql`, so the real `tiny_id_info`) with one row updated per ID, "
      "as an ID server without segments would. pgbench reports only the mean latency.")
    target = get_first(runs, "latency-undisturbed", "target_rps")
    delay = get_first(runs, "latency-undisturbed", "delay_ms")
    w(f"- **Latency at half load.** wrk is a closed loop: each connection sends its next request "
      f"when the last one is answered. To hold the rate at about half the peak (half of "
      f"nextIdSimple's requests/s above: {fmt_int(target)}/s), the lua script's `delay()` pauses "
      f"each connection before every request, {fmt_ratio(delay)} ms on average (whole "
      "milliseconds, rounded up or down at random to that mean): connections ÷ target rate, "
      "less the time a request itself takes, as found by up to three short calibration runs "
      "(`target/bench/latency-calibration-*.json`). The rate achieved is in the table. These runs "
      f"use the biz `latency` with a small step ({args.latency_step}, i.e. "
      f"{args.latency_step // 2} IDs per segment from each database), so that segments are "
      "fetched every few tens of milliseconds, also during the disturbances: (a) a `psql` "
      "session holds the biz row of database `even` with `SELECT … FOR UPDATE` and "
      "`pg_sleep`, (b) `pg_ctl stop -m immediate` stops the cluster of `even`, which is "
      "started again afterwards. The disturbance starts at a fifth of the run and lasts half "
      "of it, at most 5 s. One more undisturbed run sends `/healthz` with the same pause: "
      "the latency the HTTP framework and the machine's scheduling give without any ID "
      "work, as a floor for the ID runs. Caveat: being a closed loop, wrk does not send the requests a "
      "blocked connection would have sent meanwhile (no correction for coordinated "
      "omission), so a stall shows as one slow request per waiting connection, not as every "
      "request that would have been late.")
    w("")

    w("## Results\n")
    w("| benchmark | what | requests/s | IDs/s | mean | p50 | p99 | p99.9 | max | server CPU per request "
      "| server context switches per request | errors |")
    w("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for name, what in THROUGHPUT_RUNS:
        r = runs.get(name) or {}
        lat = r.get("latency_ms") or {}
        p999 = lat.get("p999")
        w(f"| {r.get('title', name)} | {what} | {fmt_int(r.get('rps'))} | "
          f"{fmt_int(r.get('ids_per_s')) if r.get('ids_per_request') else '—'} | "
          f"{fmt_ms(lat.get('mean'))} | {fmt_ms(lat.get('p50'))} | {fmt_ms(lat.get('p99'))} | "
          f"{fmt_ms(p999)} | {fmt_ms(lat.get('max'))} | {cpu_text(r)} | {switches_text(r)} | {errors_text(r)} |")
    w("\nRequests/s of every round, in order (the median in bold):\n")
    for name, what in THROUGHPUT_RUNS:
        r = runs.get(name) or {}
        if r.get("rounds"):
            rates = [("**" + fmt_int(x["rps"]) + "**") if x["name"] == r["name"] else fmt_int(x["rps"])
                     for x in r["rounds"]]
            w(f"- {r.get('title', name)}: {' · '.join(rates)}")
    w("\nRedis reports p50/p99 and no p99.9; pgbench only the mean. Server CPU per request: "
      "the CPU time (user + system, of which user in brackets) of the segmint or redis-server "
      "process during the run, from `/proc/PID/stat` before and after it, divided by the "
      "requests answered. It leaves out the load generator, which shares the cores (its "
      "CPU is in the CPU budget below), and so compares routes and servers more steadily "
      "than requests/s on this machine; "
      "PostgreSQL's work is spread over its backends and is not counted. Server context "
      "switches per request: voluntary / involuntary, summed over the server's threads from "
      "`/proc/PID/task/*/status`. A voluntary switch is a thread with nothing to do going to "
      "sleep; an involuntary one is a thread preempted by another runnable thread on "
      "its core, on this machine usually a load generator thread woken by a response.\n")

    w("## CPU budget\n")
    cores = info["cores"]
    w(f"The server and the load generator share this machine's {cores} cores, so a run answers "
      f"at most {cores} ÷ (server + load generator CPU per request) requests per second: its "
      "CPU ceiling. The load generator's CPU time is what bash's `time` reports for the wrk or "
      "redis-benchmark process of the run; the rows are the ones of the results table.\n")
    w("| run | requests/s | server CPU per request | load generator CPU per request | together "
      "| CPU ceiling | achieved ÷ ceiling |")
    w("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, _ in THROUGHPUT_RUNS:
        r = runs.get(name) or {}
        need = cpu_need(r)
        if need is None:
            continue
        top = cpu_ceiling(need, cores)
        w(f"| {r.get('title', name)} | {fmt_int(r.get('rps'))} | {cpu_text(r)} | "
          f"{cpu_text(r, 'client_cpu')} | {need:,.2f} µs | {fmt_int(top)} | "
          f"{fmt_ratio(ratio(r.get('rps'), top))} |")
    if any(b is not None for b in bound):
        w("\nThe server's kernel time per request (its system time: receiving and sending on "
          "loopback TCP and waiting in epoll) and the load generator's CPU stay whatever the "
          "server's own code does. With segmint's user time per request at zero — every "
          "instruction of segmint, actix-web and tokio free — nextIdSimple's CPU ceiling "
          "divided by Redis INCR's requests/s of the same round is the highest "
          "nextIdSimple ÷ Redis INCR this machine allows: "
          f"{fmt_ratio(median(bound))} (the median of the rounds: "
          f"{' · '.join(fmt_ratio(b) for b in bound)}). It assumes that the kernel time and "
          "the load generator's CPU per request would not fall at a higher rate.")
    w("")

    w("## Latency at half load\n")
    w("| condition | target rate | achieved rate | of peak | p50 | p99 | p99.9 | max | "
      "segment fetches during the run | requests that waited for a segment | errors |")
    w("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- |")
    peak = get_first(runs, "segmint-nextIdSimple", "rps")
    for name, label in LATENCY_RUNS:
        r = runs.get(name) or {}
        lat = r.get("latency_ms") or {}
        share = ratio(r.get("rps"), peak)
        w(f"| {label} | {fmt_int(r.get('target_rps'))}/s | {fmt_int(r.get('rps'))}/s | "
          f"{'—' if share is None else f'{share:.0%}'} | {fmt_ms(lat.get('p50'))} | "
          f"{fmt_ms(lat.get('p99'))} | {fmt_ms(lat.get('p999'))} | {fmt_ms(lat.get('max'))} | "
          f"{fetches_text(r)} | {waits_text(r)} | {errors_text(r)} |")
    w("\nRequests that waited for a segment: the increase of `segmint_cache_waits_total` "
      "during the run, requests that found the cache short and waited for a fetch instead "
      "of being served from memory.\n")
    for name, label in LATENCY_RUNS:
        r = runs.get(name) or {}
        if r.get("description"):
            rec = r.get("recovery_s")
            after = (f"; both databases were up again in `/readyz` {rec} s after the run"
                     if rec is not None and rec >= 0 else "")
            w(f"- {label}: {r['description']}{after}.")
    w("")

    w("## Ratios\n")
    w("| ratio | value | target | |")
    w("| --- | ---: | --- | --- |")
    for row in ratio_rows:
        unit = " ms" if row["target"].endswith("ms") else ""
        value = "—" if row["value"] is None else f"{row['value']:,.3f}{unit}" if unit else fmt_ratio(row["value"])
        w(f"| {row['ratio']} | {value} | {row['target']} | {row['verdict']} |")
    if any(values for _, values in per_round):
        w("\nWithin each round, in order (the request-rate ratios above are their medians):\n")
        for label, values in per_round:
            w(f"- {label}: {' · '.join(fmt_ratio(v) for v in values)}")
    w("\nFor context (no target):\n")
    w("| ratio | value |\n| --- | ---: |")
    for label, value in context:
        w(f"| {label} | {fmt_ratio(value)} |")
    w("")

    w("## In-process benchmarks (criterion)\n")
    if crit:
        w("Read from `target/criterion` as found when this report was written (`cargo bench "
          "--bench client` produces the groups `single_thread`, `two_threads` and `batch_1000` "
          "of the client library, `cargo bench --bench server` the groups `issue_one` and "
          "`issue_1000` of the server's cache and `request`, a whole request handled in "
          "process without a socket; `scripts/bench --with-criterion` runs both first). Each "
          "result keeps the date it was measured: results of other or older benches stay there "
          "until overwritten. \"÷ baseline\" is the throughput relative to the group's "
          "baseline: a bare `AtomicU64` (`atomic_*`) for issuance, the constant `/healthz` "
          "for `request`, where an element (\"per ID\") is a request.\n")
        w("| group | function | mean per iteration | per ID | IDs/s | ÷ baseline | measured |")
        w("| --- | --- | ---: | ---: | ---: | ---: | --- |")
        for r in crit:
            per = "—" if r["ns_per_element"] is None else f"{r['ns_per_element']:,.2f} ns"
            vs = "—" if r["vs_baseline"] is None else f"{r['vs_baseline']:.0%}"
            w(f"| {r['group']} | {r['function']} | {r['mean_ns']:,.2f} ns | {per} | "
              f"{fmt_int(r['elements_per_s'])} | {vs} | {r['measured']} |")
    else:
        w("No results in `target/criterion`: run `cargo bench --bench client` (or "
          "`scripts/bench --with-criterion`) first.")
    w("")

    w("## Problems and notes\n")
    if problems or missing:
        for name, p in problems:
            w(f"- {name}: {p}")
        for m in missing:
            if not any(m.startswith(f"{n}:") for n, _ in problems):
                w(f"- {m}")
    else:
        w("None: every run answered only 2xx, without socket errors, and segmint issued an ID "
          "for every answered request.")
    w("")
    if warnings:
        w("segmint's warnings and errors in `target/bench/logs/segmint.log` (the stalled and "
          "stopped database of the latency runs are expected to show up here):\n")
        w("| count | first | during | example |")
        w("| ---: | --- | --- | --- |")
        for g in warnings:
            example = g["example"].replace("|", "\\|")
            if len(example) > 240:
                example = example[:240] + "…"
            w(f"| {g['count']} | {g['first'][11:19]} | {', '.join(g['during'])} | `{example}` |")
    else:
        w("segmint logged no warnings or errors.")
    w("")

    w("## Commands\n")
    w("Setup (PostgreSQL commands run as the `postgres` user when the script runs as root; "
      "`segmint` is `target/release/segmint`):\n")
    w("```sh")
    with open(os.path.join(args.dir, "commands.txt")) as f:
        out.extend(line.rstrip("\n") for line in f)
    w("```\n")
    w("Measurements (`$TOKEN`: the biz's token; ports are chosen free at each run):\n")
    w("```sh")
    for name, _ in THROUGHPUT_RUNS + LATENCY_RUNS:
        if runs.get(name, {}).get("command"):
            w(runs[name]["command"])
    w("```\n")
    w("with `target/bench/nextval.sql` and `target/bench/hot-row.sql`:\n")
    w("```sql")
    for script in ("nextval.sql", "hot-row.sql"):
        with open(os.path.join(args.dir, script)) as f:
            w(f.read().strip())
    w("```\n")

    w("## Configuration\n")
    w("```toml")
    with open(args.config) as f:
        w(f.read().strip())
    w("```")
    return "\n".join(out) + "\n"


def get_first(runs, name, key):
    return (runs.get(name) or {}).get(key)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="action", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("--dir", required=True)
    rec.add_argument("--kind", required=True, choices=["wrk", "pgbench", "redis"])
    rec.add_argument("--name", required=True)
    rec.add_argument("--title", required=True)
    rec.add_argument("--command", default="")
    rec.add_argument("--ids-per-request", type=int, default=1)
    rec.add_argument("--requests", type=int,
                     help="requests of the run, for tools that do not report them (redis-benchmark)")
    rec.add_argument("--connections", type=int)
    rec.add_argument("--threads", type=int)
    rec.add_argument("--duration", type=float)
    rec.add_argument("--strict", action="store_true",
                     help="errors make the run invalid (undisturbed throughput runs)")
    rec.add_argument("--target-rps", type=float)
    rec.add_argument("--delay-ms", type=float)
    rec.add_argument("--disturbance")
    rec.add_argument("--description", default="")
    rec.add_argument("--recovery-s", type=float)
    rep = sub.add_parser("report")
    rep.add_argument("--dir", required=True)
    rep.add_argument("--out", required=True)
    rep.add_argument("--mode", choices=["full", "smoke"], required=True)
    rep.add_argument("--duration", type=int, required=True)
    rep.add_argument("--connections", type=int, required=True)
    rep.add_argument("--threads", type=int, required=True)
    rep.add_argument("--config", required=True)
    rep.add_argument("--segmint", required=True)
    rep.add_argument("--pg-bin", required=True)
    rep.add_argument("--pgbench", required=True)
    rep.add_argument("--criterion", required=True)
    rep.add_argument("--latency-step", type=int, required=True)
    rep.add_argument("--elapsed", type=int, required=True)
    rep.add_argument("--repo", required=True)
    args = parser.parse_args()
    {"record": record, "report": report}[args.action](args)


if __name__ == "__main__":
    main()
