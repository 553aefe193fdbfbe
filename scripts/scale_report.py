#!/usr/bin/env python3
"""The measurements and the report of scripts/scale. Standard library only; each
measuring command writes one JSON file (--out) that `collect` merges per size.

    scale_report.py start --out F --pidfile P --log L --base URL --biz B --token T -- CMD...
        spawns CMD (the server), writes its PID to P, and times from the spawn to the
        first answer of /healthz and to the first ID of B.
    scale_report.py settle --out F --base URL [--quiet S] [--max S]
        waits until segmint_catalog_rows_read_total{read="feed"} stops growing for S s.
    scale_report.py idle --out F --pid PID --base URL --seconds S --psql PSQL --pg-port P...
        the server's CPU, the catalog rows it read and PostgreSQL's tuples read over S s.
    scale_report.py rss --out F --pid PID
    scale_report.py cold --out F --base URL --first N --last N --count C --biz-prefix P
        --token-prefix T: the first request of C never-used bizs, one after another.
    scale_report.py routes --out F --base URL PATH...: bytes and time of one GET each.
    scale_report.py collect --dir D --size N --out F: merges D/*.json into F.
    scale_report.py report --dir D --out SCALE.md [...]: the table of every size.
"""

import argparse
import glob
import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_report  # noqa: E402  (the metrics parser and the machine description)


def die(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(1)


def write(path, data):
    with open(path, "w") as f:
        json.dump(data, f, indent=2, sort_keys=True)
        f.write("\n")


def host_port(base):
    u = urllib.parse.urlsplit(base)
    return u.hostname, u.port


def get(conn, path, headers=None, timeout=None):
    """(status, body, seconds) of one GET on `conn` (a keep-alive connection)."""
    if timeout is not None:
        conn.timeout = timeout
    start = time.perf_counter()
    conn.request("GET", path, headers=headers or {})
    resp = conn.getresponse()
    body = resp.read()
    return resp.status, body, time.perf_counter() - start


def scrape(base, tries=30):
    """The server's /metrics, parsed: {(name, labels): value}. A server busy with a large
    catalog may not answer in time (408, a timeout): tried again every second, `tries`
    times in all."""
    host, port = host_port(base)
    for attempt in range(tries):
        conn = http.client.HTTPConnection(host, port, timeout=30)
        try:
            status, body, _ = get(conn, "/metrics")
            if status == 200:
                return bench_report.parse_metrics_text(body.decode())
            failure = f"status {status}"
        except (OSError, http.client.HTTPException) as e:
            failure = repr(e)
        finally:
            conn.close()
        print(f"/metrics: {failure}; trying again", file=sys.stderr)
        time.sleep(1)
    die(f"/metrics did not answer 200 in {tries} tries: {failure}")


def counter_sum(samples, name, **match):
    """The sum of counter `name` over the series whose labels include `match`."""
    total = 0.0
    for (n, labels), value in samples.items():
        d = dict(labels)
        if n == name and all(d.get(k) == v for k, v in match.items()):
            total += value
    return total


def by_label(samples, name, label):
    """{label value: sum} of counter `name`."""
    out = {}
    for (n, labels), value in samples.items():
        if n == name:
            key = dict(labels).get(label, "")
            out[key] = out.get(key, 0.0) + value
    return out


# --- measuring ---------------------------------------------------------------------


def start(args):
    """Spawns the server and polls, as fast as a request comes back, for its first
    /healthz answer and its first ID."""
    host, port = host_port(args.base)
    log = open(args.log, "ab")
    t0 = time.monotonic()
    proc = subprocess.Popen(args.cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    with open(args.pidfile, "w") as f:
        f.write(f"{proc.pid}\n")
    path = f"/v1/ids/{args.biz}?count=1"
    headers = {"Authorization": f"Bearer {args.token}"}
    listening = None
    answers = {}
    conn = None
    while True:
        elapsed = time.monotonic() - t0
        if proc.poll() is not None:
            die(f"the server exited with {proc.returncode} after {elapsed:.2f} s; see {args.log}")
        if elapsed > args.max:
            die(f"no ID from {path} within {args.max} s (answers: {answers}); see {args.log}")
        try:
            if conn is None:
                conn = http.client.HTTPConnection(host, port, timeout=30)
            if listening is None:
                status, _, _ = get(conn, "/healthz")
                if status == 200:
                    listening = time.monotonic() - t0
                continue
            status, body, _ = get(conn, path, headers)
        except OSError:
            if conn is not None:
                conn.close()
                conn = None
            time.sleep(0.002)
            continue
        except http.client.HTTPException:
            conn.close()
            conn = None
            continue
        answers[status] = answers.get(status, 0) + 1
        if status == 200 and b'"ids":[' in body:
            first_id = time.monotonic() - t0
            break
        time.sleep(0.002)
    conn.close()
    write(args.out, {args.key: {
        "listening_s": round(listening, 4),
        "first_id_s": round(first_id, 4),
        "cpu_s": round(proc_cpu(proc.pid), 2),
        "load": load(),
        "answers_before_first_id": {str(k): v for k, v in sorted(answers.items()) if k != 200},
    }})
    print(f"{first_id:.3f}")


def settle(args):
    """Waits until the catalog reads return no more rows: the server's first witness
    writes are read back through the feed, and a database whose first read failed is
    read in full later. Settled once every database's feed has been read at least
    twice, and `quiet` seconds have passed, with no row since the last one; at most
    `max` seconds."""
    rows_name = "segmint_catalog_rows_read_total"
    reads_name = "segmint_catalog_reads_total"
    t0 = time.monotonic()
    last = None
    since = t0
    reads_at = {}
    while True:
        now = time.monotonic()
        samples = scrape(args.base)
        rows = counter_sum(samples, rows_name)
        feed_reads = {db: counter_sum(samples, reads_name, read="feed", database=db)
                      for db in by_label(samples, reads_name, "database")}
        if rows != last:
            last, since, reads_at = rows, now, feed_reads
        elif (now - since >= args.quiet and feed_reads
              and all(n - reads_at.get(db, 0) >= 2 for db, n in feed_reads.items())):
            settled = True
            break
        if now - t0 >= args.max:
            settled = False
            break
        time.sleep(1)
    # The quiet stretch itself is not part of the writing.
    waited = (since if settled else now) - t0
    write(args.out, {args.key: {"settled": settled, "seconds": round(waited, 1),
                                "quiet_s": args.quiet, "max_s": args.max,
                                "catalog_rows_read": last}})
    print("settled" if settled else "not settled")


def load():
    """The machine's load average over the last minute: how much else wanted the cores."""
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def proc_cpu(pid):
    """utime + stime of a process, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_status(pid):
    """VmRSS and VmHWM (bytes) and the thread count of a process."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) * 1024
            elif key == "Threads":
                out[key] = int(value)
    return out


def pg_stats(psql, port):
    """(tuples returned + fetched, commits) of the database segmint on one cluster."""
    out = subprocess.run(
        [psql, "-X", "-At", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-d", "postgres",
         "-c", "SELECT tup_returned + tup_fetched, xact_commit FROM pg_stat_database "
               "WHERE datname = 'segmint'"],
        capture_output=True, text=True, check=True).stdout.strip()
    tuples, commits = out.split("|")
    return int(tuples), int(commits)


def pg_tables(psql, port):
    """{table: [seq_scan, seq_tup_read, idx_scan, idx_tup_fetch]} of the database segmint
    on one cluster: which tables the reads at rest go to. Read in that database, so its
    own tuples count there: taken outside the window of `pg_stats`."""
    out = subprocess.run(
        [psql, "-X", "-At", "-F", " ", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
         "-d", "segmint", "-c",
         "SELECT relname, seq_scan, seq_tup_read, coalesce(idx_scan, 0), "
         "coalesce(idx_tup_fetch, 0) FROM pg_stat_user_tables"],
        capture_output=True, text=True, check=True).stdout
    tables = {}
    for line in out.splitlines():
        name, *counts = line.split()
        tables[name] = [int(c) for c in counts]
    return tables


def idle(args):
    """The server at rest over `seconds`: its CPU, the catalog rows it read (by kind of
    read), and the tuples PostgreSQL read and the transactions it committed in the
    database segmint of each cluster."""
    def snapshot():
        return {"cpu": proc_cpu(args.pid), "metrics": scrape(args.base),
                "pg": [pg_stats(args.psql, p) for p in args.pg_port], "t": time.monotonic()}

    def tables():
        return [pg_tables(args.psql, p) for p in args.pg_port]

    tables_before = tables()
    before = snapshot()
    time.sleep(args.seconds)
    after = snapshot()
    tables_after = tables()
    per_table = {}
    for b, a in zip(tables_before, tables_after):
        for name, counts in a.items():
            old = b.get(name, [0, 0, 0, 0])
            sums = per_table.setdefault(name, [0, 0, 0, 0])
            for i, (x, y) in enumerate(zip(old, counts)):
                sums[i] += y - x
    keys = ("seq_scan", "seq_tup_read", "idx_scan", "idx_tup_fetch")
    secs = after["t"] - before["t"]
    rows = "segmint_catalog_rows_read_total"
    reads = "segmint_catalog_reads_total"
    rows_by = {k: v - by_label(before["metrics"], rows, "read").get(k, 0.0)
               for k, v in by_label(after["metrics"], rows, "read").items()}
    reads_by = {k: v - by_label(before["metrics"], reads, "read").get(k, 0.0)
                for k, v in by_label(after["metrics"], reads, "read").items()}
    tuples = sum(a[0] - b[0] for a, b in zip(after["pg"], before["pg"]))
    commits = sum(a[1] - b[1] for a, b in zip(after["pg"], before["pg"]))
    write(args.out, {"idle": {
        "seconds": round(secs, 2),
        "cpu_percent": round((after["cpu"] - before["cpu"]) / secs * 100, 3),
        "catalog_rows_per_s": round(sum(rows_by.values()) / secs, 3),
        "catalog_rows_by_read": {k: int(v) for k, v in sorted(rows_by.items())},
        "catalog_reads_by_read": {k: int(v) for k, v in sorted(reads_by.items())},
        "pg_tuples_per_s": round(tuples / secs, 1),
        "pg_commits_per_s": round(commits / secs, 2),
        "load": load(),
        "pg_tables": {name: dict(zip(keys, v)) for name, v in sorted(per_table.items())
                      if any(v)},
    }})


def rss(args):
    write(args.out, {args.key: proc_status(args.pid)})


def percentile(values, p):
    """The p-th percentile (nearest rank) of `values`."""
    s = sorted(values)
    rank = max(1, -(-len(s) * p // 100))
    return s[int(rank) - 1]


def cold(args):
    """The first request of `count` never-used bizs, spread over [first, last], one
    after another on one keep-alive connection, each with its own token."""
    host, port = host_port(args.base)
    span = args.last - args.first + 1
    if span < args.count:
        die(f"{args.count} cold bizs need at least as many bizs, got {span}")
    picks = [args.first + k * span // args.count for k in range(args.count)]
    conn = http.client.HTTPConnection(host, port, timeout=30)
    times, errors = [], []
    deadline = time.monotonic() + args.max
    for k, n in enumerate(picks):
        if time.monotonic() > deadline:
            picks = picks[:k]
            break
        try:
            status, body, secs = get(conn, f"/v1/ids/{args.biz_prefix}{n}?count=1",
                                     {"Authorization": f"Bearer {args.token_prefix}{n}"})
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            conn = http.client.HTTPConnection(host, port, timeout=30)
            errors.append(f"{args.biz_prefix}{n}: {e!r}")
            continue
        if status == 200 and b'"ids":[' in body:
            times.append(secs * 1000)
        else:
            errors.append(f"{args.biz_prefix}{n}: {status} {body[:200].decode(errors='replace')}")
    conn.close()
    out = {"requests": len(picks), "errors": len(errors), "error_samples": errors[:3],
           "stopped_at_bound": len(picks) < args.count}
    if times:
        out.update({"p50_ms": round(percentile(times, 50), 3),
                    "p99_ms": round(percentile(times, 99), 3),
                    "max_ms": round(max(times), 3),
                    "mean_ms": round(sum(times) / len(times), 3)})
    write(args.out, {"cold": out})
    print(f"{len(errors)} of {len(picks)} failed")


def busy_start(args):
    """Spawns the server and, from its first answer until its first full catalog read is
    over (and `--after` seconds more), asks every `--every` seconds for the first ID of a
    never-used biz, one after another on one keep-alive connection: what requests meet
    while a start reads, checks and builds the catalog."""
    host, port = host_port(args.base)
    log = open(args.log, "ab")
    t0 = time.monotonic()
    proc = subprocess.Popen(args.cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    with open(args.pidfile, "w") as f:
        f.write(f"{proc.pid}\n")
    span = args.last - args.first + 1
    conn, times, errors, k = None, [], [], 0
    read = {}

    def wait_for_the_catalog():
        # A listing waits for the first full read: its answer marks the end of it.
        while time.monotonic() - t0 < args.max:
            c = http.client.HTTPConnection(host, port, timeout=args.max)
            try:
                status, _, _ = get(c, "/v1/bizs?limit=1")
                if status == 200:
                    read["at"] = time.monotonic() - t0
                    return
            except (OSError, http.client.HTTPException):
                time.sleep(0.01)
            finally:
                c.close()

    waiter = threading.Thread(target=wait_for_the_catalog, daemon=True)
    waiter.start()
    while True:
        now = time.monotonic() - t0
        if proc.poll() is not None:
            die(f"the server exited with {proc.returncode} after {now:.2f} s; see {args.log}")
        read_at = read.get("at")
        if now > args.max or (read_at is not None and now > read_at + args.after):
            break
        n = args.first + (k * 7919) % span
        k += 1
        try:
            if conn is None:
                conn = http.client.HTTPConnection(host, port, timeout=60)
            status, body, secs = get(conn, f"/v1/ids/{args.biz_prefix}{n}?count=1",
                                     {"Authorization": f"Bearer {args.token_prefix}{n}"})
        except ConnectionRefusedError:
            conn = None
            time.sleep(0.005)
            continue
        except (OSError, http.client.HTTPException) as e:
            if conn is not None:
                conn.close()
            conn = None
            if times or errors:
                errors.append(f"{args.biz_prefix}{n} at {now:.2f} s: {e!r}")
            continue
        if status == 200 and b'"ids":[' in body:
            times.append((now, secs * 1000))
        else:
            errors.append(f"{args.biz_prefix}{n} at {now:.2f} s: {status} "
                          f"{body[:200].decode(errors='replace')}")
        time.sleep(args.every)
    if conn is not None:
        conn.close()
    ms = [t for _, t in times]
    out = {"requests": len(ms) + len(errors), "errors": len(errors), "error_samples": errors[:3],
           "first_read_s": None if read_at is None else round(read_at, 2),
           "cpu_s": round(proc_cpu(proc.pid), 2), "load": load()}
    if ms:
        out.update({"p50_ms": round(percentile(ms, 50), 3),
                    "p99_ms": round(percentile(ms, 99), 3),
                    "max_ms": round(max(ms), 3),
                    "over_100_ms": sum(1 for t in ms if t > 100)})
    write(args.out, {"busy_start": out})
    print(f"{len(errors)} of {out['requests']} failed; first read over after "
          f"{out['first_read_s']} s")


def changes(args):
    """`count` bizs added at rest, one after another: each a row on both databases (the
    first `--pg-port` even, the second odd) and a token, written by SQL as an operator
    or an import would; the time from the commit until the server serves the biz, and
    the server's CPU over the `window` seconds from the commit (its refreshes read the
    change through the feed and take it in)."""
    host, port = host_port(args.base)
    conn = http.client.HTTPConnection(host, port, timeout=30)
    served, cpu = [], []
    for k in range(args.count):
        biz, token = f"change-{k}", f"changetok-{k}"
        for pg_port, remainder in zip(args.pg_port, (0, 1)):
            subprocess.run(
                [args.psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p",
                 str(pg_port), "-U", "postgres", "-d", "segmint", "-c",
                 "INSERT INTO tiny_id_info (biz_type, begin_id, max_id, step, delta, remainder) "
                 f"VALUES ('{biz}', 0, 0, 1000, 2, {remainder}); "
                 "INSERT INTO tiny_id_token (token, biz_type, remark) VALUES "
                 f"(encode(sha256(convert_to('{token}', 'UTF8')), 'hex'), '{biz}', 'scale')"],
                capture_output=True, text=True, check=True)
        cpu0, t0 = proc_cpu(args.pid), time.monotonic()
        while True:
            try:
                status, _, _ = get(conn, f"/v1/ids/{biz}?count=1",
                                   {"Authorization": f"Bearer {token}"})
            except (OSError, http.client.HTTPException) as e:
                # The server closes a connection idle past its keep-alive.
                conn.close()
                conn = http.client.HTTPConnection(host, port, timeout=30)
                status = repr(e)
            if status == 200:
                break
            if time.monotonic() - t0 > 60:
                die(f"{biz} not served 60 s after it was added (last status {status})")
            time.sleep(0.02)
        served.append(time.monotonic() - t0)
        time.sleep(max(0.0, args.window - (time.monotonic() - t0)))
        cpu.append(proc_cpu(args.pid) - cpu0)
    conn.close()
    write(args.out, {"changes": {
        "count": args.count, "window_s": args.window,
        "served_s_max": round(max(served), 3), "served_s_median": round(percentile(served, 50), 3),
        "cpu_s_median": round(percentile(cpu, 50), 3), "cpu_s_max": round(max(cpu), 3)}})
    print(f"served within {max(served):.3f} s; server CPU {percentile(cpu, 50):.2f} s per change "
          f"(median over {args.count}, {args.window:.0f} s each)")


def routes(args):
    """Bytes and time of one GET of each path, each on a new connection (the time
    includes connecting, as an operator's browser or scraper would)."""
    host, port = host_port(args.base)
    out = {}
    for path in args.paths:
        start = time.perf_counter()
        conn = http.client.HTTPConnection(host, port, timeout=300)
        try:
            status, body, _ = get(conn, path)
        except (OSError, http.client.HTTPException) as e:
            status, body = repr(e), b""
        secs = time.perf_counter() - start
        conn.close()
        out[path] = {"status": status, "bytes": len(body), "ms": round(secs * 1000, 2)}
    write(args.out, {"routes": out})


def logs(args):
    """segmint's warnings and errors of each start, grouped by message (numbers masked)."""
    out = {}
    for item in args.log:
        phase, _, path = item.partition("=")
        out[phase] = [{k: g[k] for k in ("message", "count", "example")}
                      for g in bench_report.log_warnings(path, {})]
    write(args.out, {"warnings": out})


def collect(args):
    """Merges the size's JSON files into one."""
    merged = {"size": args.size}
    for path in sorted(glob.glob(os.path.join(args.dir, "*.json"))):
        with open(path) as f:
            merged.update(json.load(f))
    write(args.out, merged)


# --- report ------------------------------------------------------------------------

# The goals of the issue, as (figure key, text, test of a value).
GOALS = {
    "first_id_s": ("< 2 s", lambda v: v < 2),
    "idle_cpu": ("< 1 % of a core", lambda v: v < 1),
    "rss_per_biz": ("≤ 1 kB", lambda v: v <= 1000),
    "cold_p99": ("< 5 ms", lambda v: v < 5),
    "bizs_ms": ("< 50 ms", lambda v: v < 50),
    "status_ms": ("< 50 ms", lambda v: v < 50),
    "import_s": ("< 60 s at 1,000,000", None),
    "catalog_rows_per_s": ("not growing with bizs", None),
    "pg_tuples_per_s": ("not growing with bizs", None),
}


def dig(d, *keys):
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def figures(run):
    """[(key, label, value, text)] of one size's run; value None when missing."""
    n = run["size"]
    rss_rest = dig(run, "rss_rest", "VmRSS")
    rss_cold = dig(run, "rss_after_cold", "VmRSS")
    bizs_path = next((p for p in dig(run, "routes") or {} if p.startswith("/v1/bizs")), None)
    imp = run.get("import") or {}
    settled = dig(run, "settle", "settled")

    def kb(x):
        return None if x is None else f"{x / 1000:,.2f} kB"

    def mib(x):
        return None if x is None else f"{x / 1048576:,.1f} MiB"

    def route(path, what):
        r = dig(run, "routes", path) if path else None
        if not r:
            return None, None
        v = r["ms"] if what == "ms" else r["bytes"]
        text = f"{r['ms']:,.1f} ms" if what == "ms" else f"{r['bytes']:,} B"
        if r["status"] != 200:
            text += f" (status {r['status']})"
        return v, text

    rows = []

    def add(key, label, value, text=None):
        if text is None and value is not None:
            text = f"{value:,}" if isinstance(value, int) else f"{value:,.3g}"
        rows.append((key, label, value, text))

    b = run.get("build") or {}
    add("build_s", "catalog built by SQL (both databases)", b.get("sql_s"),
        None if b.get("sql_s") is None else f"{b['sql_s']:,.1f} s")
    add("analyze_s", "VACUUM ANALYZE after the build", b.get("analyze_s"),
        None if b.get("analyze_s") is None else f"{b['analyze_s']:,.1f} s")
    def secs(x, digits=3):
        return None if x is None else f"{x:,.{digits}f} s"

    for key, what in (("start", "first start"), ("restart", "restart")):
        v = dig(run, key, "listening_s")
        add(f"{key}_listening_s", f"{what}: spawn to first /healthz answer", v, secs(v))
        v = dig(run, key, "first_id_s")
        add("first_id_s" if key == "restart" else "first_start_id_s",
            f"{what}: spawn to first ID", v, secs(v))
        v = dig(run, key, "cpu_s")
        add(f"{key}_cpu_s", f"{what}: server CPU until then", v, secs(v, 2))
        if key == "start":
            v = run.get("first_stop_s")
            add("first_stop_s", "first start: SIGTERM to exit", v, secs(v, 2))
            v = dig(run, "settle", "seconds")
            w = run.get("witnesses") or {}
            text = None
            if v is not None:
                text = f"{v:,.0f} s" if settled else f"> {v:,.0f} s (bound)"
                if w:
                    text += f", {w['written_by_server']:,} of {w['needed']:,} rows"
            add("settle_s", "first start: witnesses written in", v if settled else None, text)
    v = dig(run, "idle", "cpu_percent")
    add("idle_cpu", "idle CPU, % of one core", v, None if v is None else f"{v:.2f} %")
    v = dig(run, "idle", "catalog_rows_per_s")
    add("catalog_rows_per_s", "catalog rows read at rest, per s", v)
    reads = dig(run, "idle", "catalog_reads_by_read") or {}
    add("full_reads", "full catalog reads in the idle window", reads.get("full", 0) if reads else None)
    v = dig(run, "idle", "pg_tuples_per_s")
    add("pg_tuples_per_s", "PostgreSQL tuples read at rest, per s (both)", v)
    v = dig(run, "idle", "pg_commits_per_s")
    add("pg_commits_per_s", "PostgreSQL commits at rest, per s (both)", v)
    add("rss", "RSS at rest", rss_rest, mib(rss_rest))
    add("rss_per_biz", "RSS at rest per biz", None if rss_rest is None else rss_rest / n,
        kb(None if rss_rest is None else rss_rest / n))
    v = dig(run, "rss_rest", "VmHWM")
    add("rss_peak", "peak RSS up to rest (VmHWM)", v, mib(v))
    for key, label, k in (("cold_p50", "cold biz first request, p50", "p50_ms"),
                          ("cold_p99", "cold biz first request, p99", "p99_ms"),
                          ("cold_max", "cold biz first request, max", "max_ms")):
        v = dig(run, "cold", k)
        add(key, label, v, None if v is None else f"{v:,.2f} ms")
    add("rss_cold", "RSS after the cold bizs", rss_cold, mib(rss_cold))
    v = dig(run, "changes", "served_s_max")
    add("change_served_s", "a biz added at rest: served after (max)", v, secs(v))
    v = dig(run, "changes", "cpu_s_median")
    w = dig(run, "changes", "window_s")
    add("change_cpu_s", "a biz added at rest: server CPU in the next "
        f"{w or 0:.0f} s (median)", v, secs(v, 2))
    for key, label, k in (("busy_p50", "during the first read: a cold request, p50", "p50_ms"),
                          ("busy_p99", "during the first read: a cold request, p99", "p99_ms"),
                          ("busy_max", "during the first read: a cold request, max", "max_ms")):
        v = dig(run, "busy_start", k)
        add(key, label, v, None if v is None else f"{v:,.2f} ms")
    v = dig(run, "busy_start", "errors")
    r = dig(run, "busy_start", "requests")
    add("busy_errors", "during the first read: requests failed", v,
        None if v is None else f"{v:,} of {r:,}")
    for path, key, label in (("/status", "status", "/status"),
                             (bizs_path, "bizs", bizs_path or "/v1/bizs?limit=100"),
                             ("/metrics", "metrics", "/metrics")):
        v, text = route(path, "ms")
        add(f"{key}_ms", f"{label}: time", v, text)
        v, text = route(path, "bytes")
        add(f"{key}_bytes", f"{label}: bytes", v, text)
    v = run.get("stop_s")
    add("stop_s", "stop: SIGTERM to exit", v, secs(v, 2))
    label = "import tinyid of N new bizs (server stopped)"
    if imp.get("finished"):
        add("import_s", label, imp["seconds"], f"{imp['seconds']:,.1f} s")
    elif imp.get("failed"):
        add("import_s", label, None,
            f"failed after {imp['seconds']:,.0f} s, {imp.get('rows_created', 0):,} of "
            f"{2 * n:,} rows created (see the notes)")
    elif imp:
        add("import_s", label, None,
            f"> {imp['seconds']:,.0f} s (bound): {imp.get('rows_created', 0):,} of "
            f"{2 * n:,} rows created")
    else:
        add("import_s", label, None, "not run")
    rate = imp.get("rows_created", 0) / imp["seconds"] if imp.get("seconds") else None
    add("import_rate", "import: rows created per s", rate,
        None if rate is None else f"{rate:,.0f}")
    v = dig(run, "idle", "load")
    add("load", "load average (1 min) after the idle window", v,
        None if v is None else f"{v:.1f}")
    return rows


def machine_info(args):
    ns = argparse.Namespace(repo=args.repo, segmint=args.segmint, pg_bin=args.pg_bin,
                            pgbench=os.path.join(args.pg_bin, "pgbench"))
    info = bench_report.machine(ns, exclude=("BENCHMARKS.md", "SCALE.md"))
    info["versions"] = {k: v for k, v in info["versions"].items()
                        if k in ("segmint", "PostgreSQL")}
    return info


def report(args):
    runs = []
    for path in glob.glob(os.path.join(args.dir, "size-*.json")):
        with open(path) as f:
            runs.append(json.load(f))
    if not runs:
        die(f"no size-*.json in {args.dir}")
    runs.sort(key=lambda r: r["size"])
    table = [figures(r) for r in runs]
    base = table[0]
    sizes = [r["size"] for r in runs]

    def ratio(i, j):
        v, b = table[j][i][2], base[i][2]
        if j == 0 or v is None or not b:
            return ""
        return f" (×{v / b:,.1f})"

    header = ["figure"] + [f"{n:,} bizs" for n in sizes] + ["goal"]
    lines = ["| " + " | ".join(header) + " |",
             "| --- |" + " ---: |" * len(sizes) + " --- |"]
    for i, (key, label, _, _) in enumerate(base):
        cells = [label]
        for j in range(len(runs)):
            text = table[j][i][3]
            cells.append((text or "—") + ratio(i, j))
        goal = GOALS.get(key)
        if goal:
            verdicts = []
            if goal[1] is not None:
                for j in range(len(runs)):
                    v = table[j][i][2]
                    verdicts.append("—" if v is None else ("met" if goal[1](v) else "not met"))
            cells.append(goal[0] + (f": {', '.join(verdicts)}" if verdicts else ""))
        else:
            cells.append("")
        lines.append("| " + " | ".join(cells) + " |")
    table_md = "\n".join(lines)
    print(table_md)

    info = machine_info(args)
    summary = {"machine": info, "command": args.command, "elapsed_s": args.elapsed,
               "runs": runs}
    write(os.path.join(args.dir, "summary.json"), summary)
    with open(args.out, "w") as f:
        f.write(render(args, info, runs, table_md))


def notes(runs):
    """What a reader must know about a size's figures: failures, bounds hit."""
    out = []
    for r in runs:
        n = f"{r['size']:,} bizs"
        if dig(r, "cold", "stopped_at_bound"):
            out.append(f"- {n}: the cold requests were stopped after 120 s, at "
                       f"{r['cold']['requests']} requests.")
        if dig(r, "cold", "errors"):
            out.append(f"- {n}: {r['cold']['errors']} of {r['cold']['requests']} cold requests "
                       f"failed, e.g. `{r['cold']['error_samples'][0]}`")
        for phase, groups in (r.get("warnings") or {}).items():
            for g in groups:
                out.append(f"- {n}, {'first start' if phase == 'start' else phase}: "
                           f"logged {g['count']} × `{g['example'][:300]}`")
        if dig(r, "settle", "settled") is False:
            w = r.get("witnesses") or {}
            out.append(f"- {n}: on the first start the feed still returned rows after "
                       f"{r['settle']['seconds']:,.0f} s: the server had written "
                       f"{w.get('written_by_server', 0):,} of the {w.get('needed', 0):,} "
                       f"witness rows; the other {r.get('witnesses_by_sql', 0):,} were "
                       "written by SQL before the restart.")
        if dig(r, "resettle", "settled") is False:
            out.append(f"- {n}: after the restart the feed still returned rows after "
                       f"{r['resettle']['seconds']:,.0f} s: the idle figures are not at rest.")
        imp = r.get("import") or {}
        if imp.get("failed"):
            out.append(f"- {n}: the import failed: `{imp['failed'][:300]}`")
        elif imp and not imp.get("finished"):
            out.append(f"- {n}: the import was stopped at the bound ({imp['seconds']:,.0f} s), "
                       f"having created {imp.get('rows_created', 0):,} of {2 * r['size']:,} rows.")
        full = dig(r, "idle", "catalog_reads_by_read", "full")
        if full:
            out.append(f"- {n}: the idle window held {full} full catalog read(s) (every "
                       "`protocol.full_refresh_ms`, 10 minutes by default).")
        status = {p: x["status"] for p, x in (r.get("routes") or {}).items() if x["status"] != 200}
        if status:
            out.append(f"- {n}: routes answered other than 200: {status}")
    return out


def table_reads(runs):
    """PostgreSQL's reads at rest by table: what the tuples of the results are."""
    names = sorted({t for r in runs for t in (dig(r, "idle", "pg_tables") or {})})
    if not names:
        return None
    lines = ["| table | " + " | ".join(f"{r['size']:,} bizs" for r in runs) + " |",
             "| --- |" + " ---: |" * len(runs)]
    for t in names:
        cells = []
        for r in runs:
            x = dig(r, "idle", "pg_tables", t)
            secs = dig(r, "idle", "seconds")
            cells.append("—" if not x else
                         f"{x['seq_scan']} seq ({x['seq_tup_read'] / secs:,.0f} tuples/s), "
                         f"{x['idx_scan']} index ({x['idx_tup_fetch'] / secs:,.0f}/s)")
        lines.append(f"| `{t}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render(args, info, runs, table_md):
    first = runs[0]
    idle_s = dig(first, "idle", "seconds")
    cold_n = dig(first, "cold", "requests")
    settle_q = dig(first, "settle", "quiet_s")
    out = []
    w = out.append
    w("# segmint at scale\n")
    w(f"Written by `scripts/scale` on {info['date']}: every figure below comes from that one "
      f"run (about {args.elapsed:,} s, build excluded), started as\n")
    w(f"```sh\n{args.command}\n```\n")
    w("Run it again to refresh them (`scripts/scale` alone runs 1,000, 100,000 and 1,000,000 "
      "bizs; `--smoke` a quick 1,000 and 5,000 into `target/scale/SCALE.smoke.md`). Raw "
      "figures: `target/scale/size-N.json` (one file per size) and `target/scale/summary.json`; "
      "the server's logs of each size are `target/scale/size-N/segmint-start.log` and `segmint-restart.log`.\n")
    w("The machine is small and was not idle (the load average is in the table), and the "
      "measuring processes (Python's `http.client`, `psql`) run on the same two cores as "
      "segmint and both PostgreSQL clusters: read every figure as one noisy sample. The "
      "server's CPU time until its first ID tells its own work from waiting for the "
      "databases and the cores.\n")
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
    w("- **Catalog.** For each size N, two fresh PostgreSQL clusters (initdb defaults, so "
      "`fsync` on) hold the databases `even` (IDs ≡ 0 mod 2) and `odd` (1 mod 2); after "
      "`segmint migrate`, one `INSERT … SELECT … FROM generate_series` per table and "
      "database (both databases at once, each in one transaction) writes the bizs `biz-1` … "
      "`biz-N` (step 1000, in the database's class) and a token per biz, `tok-<n>` for "
      "`biz-<n>`, stored as `segmint token add` stores one: "
      "`encode(sha256(convert_to('tok-' || n, 'UTF8')), 'hex')`. `VACUUM ANALYZE` and "
      "`CHECKPOINT` follow (timed apart), so that autovacuum and a checkpoint of the build "
      "do not fall on the measurements.")
    w("- **First start.** The release `segmint serve` with every key at its default (no "
      "`operator_token`). From the spawn, one keep-alive connection polls `/healthz` until "
      "it answers 200, then `GET /v1/ids/biz-1?count=1` with `Authorization: Bearer tok-1` "
      "until it answers an ID, each request sent as soon as the last came back; the "
      "server's CPU time (utime + stime, `/proc/PID/stat`) is read at that moment. On its "
      "first start over a catalog a server writes the witness of every biz row into the "
      "other database, a bounded number per refresh (every `catalog_refresh_ms`, 5 s), and "
      "reads them back through the change feed: the figure is the time until "
      f"`segmint_catalog_rows_read_total{{read=\"feed\"}}` last grew before {settle_q:.0f} s "
      "without growth (polled every second), at most `--settle-max`, with the witness rows "
      "found in both databases then.")
    w("- **Restart.** The server is stopped (SIGTERM); the witness rows it had not written "
      "yet, if any, are written by SQL as it would have written them, and `ANALYZE` gives "
      "the planner their statistics (as autovacuum does within a minute of them). The "
      "server is started again and timed as above: what a server restarted over a "
      "witnessed catalog meets. Every figure below is of this second process, once the "
      "feed is quiet again.")
    w(f"- **At rest**, over {idle_s:.0f} s: the server's CPU as a share of one core; the "
      "increase of `segmint_catalog_rows_read_total` (every label) per second; PostgreSQL's "
      "own count, the increase of `tup_returned + tup_fetched` and of `xact_commit` in "
      "`pg_stat_database` for the database `segmint`, both clusters summed, per second "
      "(PostgreSQL publishes a backend's counts at most once a second, or after 10 s idle, "
      "so the window's edges blur them by that much), and by table from "
      "`pg_stat_user_tables` (below the results). Then VmRSS from `/proc/PID/status`, and "
      "per biz (RSS ÷ N, the server's fixed memory included).")
    w(f"- **Cold bizs.** The first request, `GET /v1/ids/biz-<n>?count=1` with its own token "
      f"`tok-<n>`, of {cold_n} never-used bizs spread evenly over `biz-2` … `biz-N`, one "
      "after another on one keep-alive connection, timed from sending to the whole answer "
      "(each reserves a first segment on a database and writes its witness before it "
      "answers); p50 and p99 (nearest rank), then the RSS again.")
    w("- **Bizs added at rest.** Five times, one after the other: a biz `change-<k>` is "
      "inserted by SQL on both databases, in their classes, with a token; from the commit, "
      "`GET /v1/ids/change-<k>?count=1` with that token is sent every 20 ms until it "
      "answers an ID (the slowest of the five is shown), and the server's CPU is read over "
      "the 10 s from the commit: its refreshes read the change through the feed and take it "
      "in (the median of the five is shown).")
    w("- **Operator routes.** One `GET` each of `/status`, `/v1/bizs?limit=100` (a server "
      "without paging ignores `limit` and lists every biz) and `/metrics`, each on a new "
      "connection, after the cold bizs: bytes of the body and time to the whole answer.")
    w("- **During the first read.** After the operator routes the server is stopped and "
      "started a third time. From the spawn, the first ID of a never-used biz "
      "(`GET /v1/ids/biz-<n>?count=1` with its token, a new biz each time) is asked every "
      "20 ms, one after another on one keep-alive connection, until 5 s after the first "
      "full catalog read is over (when a `GET /v1/bizs?limit=1` sent on another connection "
      "at the start, which waits for that read, answers). Until then the server serves "
      "from looks at single bizs; meanwhile it reads, checks and builds the catalog. "
      "p50, p99 and max of the answered requests, and the failed ones.")
    w("- **Import.** With the server stopped (its time is the command's alone), "
      "`segmint import tinyid FILE` of a `mysql --batch` file of N new bizs (`imported-<n>`, "
      "`max_id` 1000, step 1000, delta 1), which creates each in both databases beside the "
      "N bizs already there; stopped at `--import-max`, when the rows it created by then "
      "are counted.")
    w("")
    w("## Results\n")
    w("Ratios in brackets are to the smallest size. Goals are issue 33's.\n")
    w(table_md)
    w("")
    reads = table_reads(runs)
    if reads:
        w("PostgreSQL's reads at rest by table (both clusters, over the idle window): scans, "
          "and the tuples they read per second.\n")
        w(reads)
        w("")
    w("## Notes\n")
    w("\n".join(notes(runs)) or "- none")
    w("")
    w("## Configuration\n")
    w("Of the last size (ports differ between sizes):\n")
    with open(args.config) as f:
        w(f"```toml\n{f.read().strip()}\n```")
    return "\n".join(out) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd_name", required=True)
    s = sub.add_parser("start")
    s.add_argument("--out", required=True)
    s.add_argument("--pidfile", required=True)
    s.add_argument("--log", required=True)
    s.add_argument("--base", required=True)
    s.add_argument("--biz", required=True)
    s.add_argument("--token", required=True)
    s.add_argument("--key", default="start")
    s.add_argument("--max", type=float, default=900)
    s.add_argument("cmd", nargs="+")
    s.set_defaults(func=start)
    s = sub.add_parser("settle")
    s.add_argument("--out", required=True)
    s.add_argument("--base", required=True)
    s.add_argument("--key", default="settle")
    s.add_argument("--quiet", type=float, default=12)
    s.add_argument("--max", type=float, default=300)
    s.set_defaults(func=settle)
    s = sub.add_parser("idle")
    s.add_argument("--out", required=True)
    s.add_argument("--pid", type=int, required=True)
    s.add_argument("--base", required=True)
    s.add_argument("--seconds", type=float, default=20)
    s.add_argument("--psql", required=True)
    s.add_argument("--pg-port", type=int, action="append", required=True)
    s.set_defaults(func=idle)
    s = sub.add_parser("rss")
    s.add_argument("--out", required=True)
    s.add_argument("--pid", type=int, required=True)
    s.add_argument("--key", required=True)
    s.set_defaults(func=rss)
    s = sub.add_parser("cold")
    s.add_argument("--out", required=True)
    s.add_argument("--base", required=True)
    s.add_argument("--first", type=int, required=True)
    s.add_argument("--last", type=int, required=True)
    s.add_argument("--count", type=int, default=200)
    s.add_argument("--max", type=float, default=120, help="seconds for all the requests")
    s.add_argument("--biz-prefix", required=True)
    s.add_argument("--token-prefix", required=True)
    s.set_defaults(func=cold)
    s = sub.add_parser("busy-start")
    s.add_argument("--out", required=True)
    s.add_argument("--pidfile", required=True)
    s.add_argument("--log", required=True)
    s.add_argument("--base", required=True)
    s.add_argument("--first", type=int, required=True)
    s.add_argument("--last", type=int, required=True)
    s.add_argument("--every", type=float, default=0.02, help="seconds between requests")
    s.add_argument("--after", type=float, default=5, help="seconds on after the first read")
    s.add_argument("--max", type=float, default=300)
    s.add_argument("--biz-prefix", required=True)
    s.add_argument("--token-prefix", required=True)
    s.add_argument("cmd", nargs="+")
    s.set_defaults(func=busy_start)
    s = sub.add_parser("changes")
    s.add_argument("--out", required=True)
    s.add_argument("--pid", type=int, required=True)
    s.add_argument("--base", required=True)
    s.add_argument("--count", type=int, default=5)
    s.add_argument("--window", type=float, default=10)
    s.add_argument("--psql", required=True)
    s.add_argument("--pg-port", type=int, action="append", required=True)
    s.set_defaults(func=changes)
    s = sub.add_parser("routes")
    s.add_argument("--out", required=True)
    s.add_argument("--base", required=True)
    s.add_argument("paths", nargs="+")
    s.set_defaults(func=routes)
    s = sub.add_parser("logs")
    s.add_argument("--out", required=True)
    s.add_argument("--log", action="append", required=True, help="PHASE=PATH")
    s.set_defaults(func=logs)
    s = sub.add_parser("collect")
    s.add_argument("--dir", required=True)
    s.add_argument("--size", type=int, required=True)
    s.add_argument("--out", required=True)
    s.set_defaults(func=collect)
    s = sub.add_parser("report")
    s.add_argument("--dir", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--config", required=True)
    s.add_argument("--command", required=True)
    s.add_argument("--elapsed", type=int, required=True)
    s.add_argument("--repo", required=True)
    s.add_argument("--segmint", required=True)
    s.add_argument("--pg-bin", required=True)
    s.set_defaults(func=report)
    args = p.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
