#!/usr/bin/env python3
"""redis-py, unchanged, against segmint's Redis listener (run by tests/resp.rs).

    python tests/resp_client.py --port PORT --order-token T --chat-token T

(or SEGMINT_RESP_PORT, SEGMINT_ORDER_TOKEN, SEGMINT_CHAT_TOKEN). The server's
`[resp] keys` table must name `order_id` → biz `order` (IDs) and `msg_seq:` → biz
`chat` (a sequence biz); the order token is granted `order` only, the chat token
`chat` only.

It checks, with redis-py's ordinary API (`redis.Redis(host, port, password=token)`,
`username="default"`, `protocol=3`, `client_name=...`, `db=0`, a `ConnectionPool`
shared by threads): authentication (a wrong token, a wrong user, no token), every
command segmint answers in RESP2 and in RESP3, the key table, error replies mapped to
redis-py's exceptions (the connection kept), pipelines of 1,000 commands, threads
sharing a pool, and the default `pipeline()` (MULTI/EXEC). It prints what it checked,
then one line `summary: {json}` of what it took (the IDs of `order`, the numbers of
`chat`, the INCR and INCRBY commands answered) for the test to compare with the
server's metrics. Any mismatch raises, and the script exits non-zero.
"""

import argparse
import json
import os
import sys
import threading
import time
import uuid

import redis
from redis.exceptions import (
    AuthenticationError,
    NoPermissionError,
    ResponseError,
)


class Tally:
    """What the script took from the server, and the increments it got an answer for."""

    def __init__(self):
        self.lock = threading.Lock()
        self.ids = []  # every ID of biz `order`
        self.numbers = 0  # numbers of biz `chat` (an INCRBY n takes n)
        # INCR and INCRBY commands answered with a number (redis-py's `incr(key)` sends
        # `INCRBY key 1`)
        self.increments = 0
        # Of those, and of those never run, the ones sent between MULTI and EXEC
        self.queued = 0

    def took_ids(self, ids):
        with self.lock:
            self.ids.extend(ids)

    def took_numbers(self, n):
        with self.lock:
            self.numbers += n

    def answered_increments(self, n):
        with self.lock:
            self.increments += n

    def queued_increments(self, n):
        with self.lock:
            self.queued += n


TALLY = Tally()
UNIQUE = uuid.uuid4().hex[:8]


def key(name):
    """A sequence key of biz `chat` no other run used: `msg_seq:NAME-xxxxxxxx`."""
    return f"msg_seq:{name}-{UNIQUE}"


def check(what):
    print(f"ok: {what}", flush=True)


def line(e):
    """The error line as the server sent it: redis-py keeps a known code (ERR, NOAUTH,
    WRONGPASS, NOPERM…) apart from the message, and leaves others (WRONGTYPE) in it."""
    code = getattr(e, "status_code", None)
    return f"{code} {e}" if code else str(e)


def expect_error(kind, says, call, *args, **kwargs):
    """`call(...)` raises `kind` whose error line contains `says`; the exception."""
    try:
        got = call(*args, **kwargs)
    except kind as e:
        what = f"{call.__name__}{args}: {type(e).__name__}({line(e)!r})"
        assert says in line(e), f"{what}, not {says!r}"
        return e
    raise AssertionError(f"{call.__name__}{args}: answered {got!r}, not {kind.__name__} {says!r}")


def shown(replies):
    """Replies with errors as their lines (redis-py's repr of an error omits its text)."""
    return [f"<{line(r)}>" if isinstance(r, Exception) else r for r in replies]


def text(reply):
    return reply.decode() if isinstance(reply, bytes) else reply


def incr_id(r, k="order_id"):
    """INCR of an ID biz's key: an integer ID, tallied."""
    got = r.incr(k)
    assert isinstance(got, int), f"INCR {k}: {got!r} is not an integer"
    TALLY.took_ids([got])
    TALLY.answered_increments(1)
    return got


def incr_seq(r, k):
    got = r.incr(k)
    assert isinstance(got, int), f"INCR {k}: {got!r} is not an integer"
    TALLY.took_numbers(1)
    TALLY.answered_increments(1)
    return got


def ids(r, n, k="order_id"):
    got = r.execute_command("IDS", k, n)
    assert isinstance(got, list) and len(got) == n, f"IDS {k} {n}: {got!r}"
    assert all(isinstance(i, int) for i in got), f"IDS {k} {n}: {got!r}"
    assert got == sorted(set(got)), f"IDS {k} {n}: not increasing: {got!r}"
    TALLY.took_ids(got)
    return got


def authentication(host, port, order, chat):
    """Wrong tokens and users are refused at connect; a command without a token with
    NOAUTH; `auth()` on a connection, as with Redis."""
    for protocol in (2, 3):
        # A refused handshake is a ConnectionError to redis-py, which it retries with
        # backoff by default; without retries the test stays fast.
        opts = dict(host=host, port=port, protocol=protocol, retry=None)
        wrong = redis.Redis(password="0" * 64, **opts)
        expect_error(AuthenticationError, "WRONGPASS invalid username-password", wrong.ping)
        wrong_user = redis.Redis(username="admin", password=order, **opts)
        expect_error(AuthenticationError, "WRONGPASS", wrong_user.ping)
        # No token: refused at the handshake (RESP2's CLIENT SETINFO, RESP3's HELLO 3).
        none = redis.Redis(**opts)
        expect_error(AuthenticationError, "NOAUTH", none.incr, "order_id")
        check(f"RESP{protocol}: a wrong token, user or no token raise AuthenticationError")
    # Without a password, RESP2: NOAUTH for every command but AUTH; then `auth()`, and
    # commands on the connection it authenticated. redis-py's handshake sends CLIENT
    # SETINFO, refused with NOAUTH before AUTH (as by Redis 7.2+), and redis-py 8
    # speaks RESP3 unless told otherwise, whose HELLO 3 is refused likewise: without
    # SETINFO (`driver_info=None`) and in RESP2, the client connects, and INCR is
    # refused.
    r = redis.Redis(
        host=host,
        port=port,
        protocol=2,
        driver_info=None,
        single_connection_client=True,
        retry=None,
    )
    expect_error(AuthenticationError, "NOAUTH Authentication required", r.incr, "order_id")
    expect_error(AuthenticationError, "NOAUTH Authentication required", r.ping)
    assert r.auth(order) is True, "AUTH token"
    assert r.ping() is True
    incr_id(r)
    assert r.auth(chat, username="default") is True, "AUTH default token"
    assert incr_seq(r, key("auth")) == 1
    expect_error(AuthenticationError, "WRONGPASS", r.auth, "f" * 64)
    r.close()
    check("NOAUTH before AUTH, then auth() and auth(username='default') on one connection")


def commands(host, port, order, chat, protocol, decode):
    """Every command through redis-py's methods, on one client's connection."""
    p = f"RESP{protocol}{' decoded' if decode else ''}"
    name = f"resp-client-{protocol}"
    opts = dict(
        host=host,
        port=port,
        username="default",
        protocol=protocol,
        client_name=name,
        db=0,
        decode_responses=decode,
        socket_timeout=30,
        single_connection_client=True,
    )
    r = redis.Redis(password=order, **opts)
    s = redis.Redis(password=chat, **opts)
    raw = (lambda b: b) if decode else (lambda b: b.encode())
    # The handshake: HELLO 3 AUTH (RESP3) or AUTH (RESP2), CLIENT SETNAME, SETINFO.
    assert r.ping() is True
    if protocol == 3:
        hello = r.connection.handshake_metadata
        assert hello is not None, "no HELLO reply"
        hello = {text(k): v for k, v in hello.items()}
        assert hello["proto"] == 3 and text(hello["server"]) == "segmint", f"HELLO: {hello!r}"
        got = r.execute_command("HELLO", 3, "AUTH", "default", order, "SETNAME", name)
        assert isinstance(got, dict) and got[raw("proto")] == 3, f"HELLO 3: {got!r}"
    else:
        got = r.execute_command("HELLO", 2)
        assert isinstance(got, list) and raw("segmint") in got, f"HELLO 2: {got!r}"
    # A str in RESP2, bytes in RESP3 unless decoded (redis-py's callbacks; as with Redis).
    assert text(r.client_getname()) == name, f"CLIENT GETNAME: {r.client_getname()!r}"
    assert r.client_setname(f"{name}-renamed") is True
    assert text(r.client_getname()) == f"{name}-renamed"
    assert isinstance(r.client_id(), int)
    assert r.client_setinfo("LIB-NAME", "segmint-test") is True
    # PING's response callback turns any reply but PONG into False: read it raw.
    r.connection.send_command("PING", "hello")
    assert r.connection.read_response() == raw("hello"), "PING hello"
    assert r.select(0) is True
    expect_error(ResponseError, "ERR DB index is out of range", r.select, 1)
    assert r.command_count() == len(r.command()), "COMMAND COUNT and COMMAND agree"
    assert {"incr", "incrby", "get", "ids", "info"} <= {text(c) for c in r.command()}
    assert {text(k): text(v) for k, v in r.config_get("save").items()} == {"save": ""}
    info = r.info()
    assert info["redis_mode"] == "standalone" and info["loading"] == 0, repr(info)
    assert r.info("server")["tcp_port"] == port, repr(r.info("server"))
    me = r.client_id()
    listed = r.client_list()
    assert str(me) in [text(c["id"]) for c in listed], repr(listed)
    assert text(r.client_info()["name"]) == f"{name}-renamed", repr(r.client_info())
    check(
        f"{p}: handshake (username, password, client_name, db=0), PING, HELLO, CLIENT, "
        "SELECT, COMMAND, CONFIG GET, INFO, CLIENT LIST/INFO"
    )

    # IDs: `order_id` by the key table, `order` by the biz's own name.
    first = incr_id(r)
    second = incr_id(r, "order")
    batch = ids(r, 3)
    assert first < second < batch[0], f"{first}, {second}, {batch}"
    assert incr_id(r) > batch[-1]
    check(f"{p}: INCR order_id / INCR order / IDS order_id 3: {first}, {second}, {batch}")

    # A sequence key, by the table's prefix and by the biz's own name.
    k = key(f"c{protocol}{int(decode)}")
    assert incr_seq(s, k) == 1
    assert s.incrby(k, 5) == 6
    TALLY.took_numbers(5)
    TALLY.answered_increments(1)
    assert s.get(k) == raw("6"), repr(s.get(k))
    assert incr_seq(s, "chat:" + k.removeprefix("msg_seq:")) == 7, "the same key by biz name"
    assert s.get(key("never")) == raw("0")
    check(f"{p}: INCR/INCRBY/GET {k} and chat:… are one key: 1, 6, 6, 7; an unused key is 0")

    # Errors are ResponseErrors (NOPERM: NoPermissionError); the connection stays: the
    # name set on it is still there (a new connection would have the one of client_name).
    expect_error(ResponseError, "WRONGTYPE", r.incrby, "order_id", 2)
    expect_error(ResponseError, "WRONGTYPE", r.get, "order_id")
    expect_error(ResponseError, "WRONGTYPE", s.execute_command, "IDS", k, 2)
    expect_error(NoPermissionError, "NOPERM", s.incr, "order_id")
    expect_error(NoPermissionError, "NOPERM", r.incr, k)
    expect_error(ResponseError, "ERR value is not an integer", s.incrby, k, 0)
    expect_error(ResponseError, "does not exist", r.incr, "nope:1")
    expect_error(ResponseError, "ERR unknown command 'SET'", r.set, "a", "1")
    expect_error(ResponseError, "ERR unknown command 'FLUSHALL'", r.execute_command, "FLUSHALL")
    expect_error(ResponseError, "ERR wrong number of arguments", r.execute_command, "INCR")
    assert text(r.client_getname()) == f"{name}-renamed", "the connection was replaced"
    assert r.ping() is True
    assert s.get(k) == raw("7"), "a refusal took a number"
    assert incr_id(r) > batch[-1] + 1
    check(
        f"{p}: WRONGTYPE, NOPERM, bad values, unknown commands raise ResponseError; "
        "the connection stays and nothing was taken"
    )

    # QUIT closes the connection; redis-py connects again for the next command.
    assert r.quit() is True
    assert r.ping() is True and text(r.client_getname()) == name, "reconnected with client_name"
    check(f"{p}: QUIT, then a new connection")
    r.close()
    s.close()


def pipelines(host, port, order, chat, protocol):
    """`pipeline(transaction=False)`: 1,000 commands in one write, answered in order."""
    p = f"RESP{protocol}"
    r = redis.Redis(host=host, port=port, password=order, protocol=protocol)
    s = redis.Redis(host=host, port=port, password=chat, protocol=protocol)
    pipe = r.pipeline(transaction=False)
    for _ in range(1_000):
        pipe.incr("order_id")
    got = pipe.execute()
    assert len(got) == 1_000 and all(isinstance(i, int) for i in got), got[:5]
    assert len(set(got)) == 1_000, "an ID twice in one pipeline"
    assert got == sorted(got), "IDs of one pipeline out of order"
    TALLY.took_ids(got)
    TALLY.answered_increments(1_000)
    k = key(f"pipe{protocol}")
    pipe = s.pipeline(transaction=False)
    for _ in range(1_000):
        pipe.incr(k)
    got = pipe.execute()
    assert got == list(range(1, 1_001)), f"sequence replies out of order: {got[:5]}…"
    TALLY.took_numbers(1_000)
    TALLY.answered_increments(1_000)
    check(
        f"{p}: pipeline(transaction=False) of 1,000 INCR order_id (distinct, increasing) "
        f"and of 1,000 INCR {k} (1..1000 in order)"
    )
    # Mixed commands and errors: each answered in its place, the rest run.
    pipe = s.pipeline(transaction=False)
    pipe.incr(k).incrby(k, 10).get(k).execute_command("IDS", k, 2).set("x", 1).ping().incr(k)
    got = pipe.execute(raise_on_error=False)
    assert got[:3] == [1_001, 1_011, b"1011"], shown(got)
    assert isinstance(got[3], ResponseError) and "WRONGTYPE" in line(got[3]), shown(got)
    assert isinstance(got[4], ResponseError) and "ERR unknown" in line(got[4]), shown(got)
    assert got[5:] == [True, 1_012], shown(got)
    TALLY.took_numbers(12)
    TALLY.answered_increments(3)
    pipe = s.pipeline(transaction=False)
    pipe.incr(k).execute_command("IDS", k, 2).incr(k)
    e = expect_error(ResponseError, "WRONGTYPE", pipe.execute)
    assert "Command # 2" in str(e), line(e)
    TALLY.took_numbers(2)
    TALLY.answered_increments(2)
    assert s.get(k) == b"1014", "the commands after an error ran"
    check(
        f"{p}: a pipeline of mixed commands with errors: replies in place, execute() "
        "raises the first error, all ran"
    )
    r.close()
    s.close()


def threads(host, port, order, chat, protocol):
    """Threads sharing one ConnectionPool: no ID twice, every number once."""
    n_threads, rounds = 8, 100
    pool = redis.ConnectionPool(
        host=host,
        port=port,
        username="default",
        password=order,
        protocol=protocol,
        client_name="resp-client-pool",
        max_connections=n_threads,
    )
    seq_pool = redis.ConnectionPool(
        host=host, port=port, password=chat, protocol=protocol, max_connections=n_threads
    )
    k = key(f"shared{protocol}")
    seen_ids = [[] for _ in range(n_threads)]
    seen_numbers = [[] for _ in range(n_threads)]
    errors = []
    start = threading.Barrier(n_threads)

    def work(i):
        try:
            r = redis.Redis(connection_pool=pool)
            s = redis.Redis(connection_pool=seq_pool)
            start.wait(timeout=30)
            for j in range(rounds):
                seen_ids[i].append(incr_id(r))
                seen_numbers[i].append(incr_seq(s, k))
                if j % 10 == 0:
                    seen_ids[i].extend(ids(r, 20))
        except BaseException as e:  # reported by the main thread
            errors.append(f"thread {i}: {type(e).__name__}: {e}")

    workers = [threading.Thread(target=work, args=(i,)) for i in range(n_threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
        assert not w.is_alive(), "a thread is stuck"
    assert not errors, "\n".join(errors)
    all_ids = [i for each in seen_ids for i in each]
    assert len(all_ids) == n_threads * rounds * 3, len(all_ids)
    assert len(set(all_ids)) == len(all_ids), f"{len(all_ids) - len(set(all_ids))} IDs twice"
    for each in seen_ids:
        assert each == sorted(each), "one thread's IDs out of order"
    numbers = sorted(n for each in seen_numbers for n in each)
    assert numbers == list(range(1, n_threads * rounds + 1)), "a number twice or missing"
    used = len(pool._available_connections) + len(pool._in_use_connections)
    assert used > 1, f"the threads shared {used} connection"
    pool.disconnect()
    seq_pool.disconnect()
    check(
        f"RESP{protocol}: {n_threads} threads on a ConnectionPool of {used} connections: "
        f"{len(all_ids)} IDs, none twice; {len(numbers)} numbers of one key, each once"
    )


def transactions(host, port, order, chat, protocol):
    """The default `pipeline()` (MULTI … EXEC), DISCARD, EXEC without MULTI."""
    p = f"RESP{protocol}"
    r = redis.Redis(host=host, port=port, password=order, protocol=protocol)
    s = redis.Redis(host=host, port=port, password=chat, protocol=protocol)
    k = key(f"tx{protocol}")
    with r.pipeline() as pipe:
        pipe.incr("order_id").execute_command("IDS", "order_id", 2).ping().incr("order_id")
        got = pipe.execute()
    assert len(got) == 4 and got[2] is True, shown(got)
    taken = [got[0], *got[1], got[3]]
    assert all(isinstance(i, int) for i in taken) and taken == sorted(set(taken)), got
    TALLY.took_ids(taken)
    TALLY.answered_increments(2)
    TALLY.queued_increments(2)
    with s.pipeline() as pipe:
        pipe.incr(k).incrby(k, 3).get(k).incr(k)
        got = pipe.execute()
    assert got == [1, 4, b"4", 5], shown(got)
    TALLY.took_numbers(5)
    TALLY.answered_increments(3)
    TALLY.queued_increments(3)
    check(f"{p}: pipeline() (MULTI/EXEC) of INCR, IDS, PING, INCRBY, GET: {got}")
    # An error as a queued command runs: in its place, the others run.
    with s.pipeline() as pipe:
        pipe.incr(k).execute_command("IDS", k, 2).incr(k)
        got = pipe.execute(raise_on_error=False)
    assert got[0] == 6 and got[2] == 7, shown(got)
    assert isinstance(got[1], ResponseError) and "WRONGTYPE" in line(got[1]), shown(got)
    TALLY.took_numbers(2)
    TALLY.answered_increments(2)
    TALLY.queued_increments(2)
    # A command refused as it is queued: EXECABORT, none run; redis-py raises the
    # refusal.
    with s.pipeline() as pipe:
        pipe.incr(k).set("x", 1).incr(k)
        expect_error(ResponseError, "unknown command", pipe.execute)
    assert s.get(k) == b"7", "a transaction refused at EXEC ran"
    TALLY.queued_increments(2)
    check(
        f"{p}: an error at EXEC takes its place in the reply; a refused queued command "
        "runs none (EXECABORT)"
    )
    # By hand on one connection: MULTI, QUEUED, DISCARD; EXEC without MULTI.
    one = redis.Redis(
        host=host, port=port, password=chat, protocol=protocol, single_connection_client=True
    )
    assert text(one.execute_command("MULTI")) == "OK"
    assert text(one.execute_command("INCR", k)) == "QUEUED"
    assert text(one.execute_command("DISCARD")) == "OK"
    assert one.get(k) == b"7", "DISCARD ran the queued INCR"
    TALLY.queued_increments(1)
    expect_error(ResponseError, "ERR EXEC without MULTI", one.execute_command, "EXEC")
    expect_error(ResponseError, "ERR DISCARD without MULTI", one.execute_command, "DISCARD")
    assert text(one.execute_command("MULTI")) == "OK"
    assert text(one.execute_command("INCR", k)) == "QUEUED"
    assert one.execute_command("EXEC") == [8], "EXEC by hand"
    TALLY.took_numbers(1)
    TALLY.answered_increments(1)
    TALLY.queued_increments(1)
    check(f"{p}: MULTI/QUEUED/DISCARD, EXEC and DISCARD without MULTI, MULTI/EXEC by hand")
    for c in (r, s, one):
        c.close()


def main():
    env = os.environ.get
    args = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    args.add_argument("--host", default=env("SEGMINT_RESP_HOST", "127.0.0.1"))
    args.add_argument("--port", type=int, default=env("SEGMINT_RESP_PORT"))
    args.add_argument("--order-token", default=env("SEGMINT_ORDER_TOKEN"))
    args.add_argument("--chat-token", default=env("SEGMINT_CHAT_TOKEN"))
    a = args.parse_args()
    if not (a.port and a.order_token and a.chat_token):
        args.error("--port, --order-token and --chat-token (or SEGMINT_*) are required")
    print(f"redis-py {redis.__version__} against {a.host}:{a.port}", flush=True)
    started = time.monotonic()
    host, port, order, chat = a.host, a.port, a.order_token, a.chat_token
    authentication(host, port, order, chat)
    for protocol in (2, 3):
        for decode in (False, True):
            commands(host, port, order, chat, protocol, decode)
        pipelines(host, port, order, chat, protocol)
        threads(host, port, order, chat, protocol)
    # MULTI/EXEC last: the newest part of the server.
    for protocol in (2, 3):
        transactions(host, port, order, chat, protocol)
    assert len(set(TALLY.ids)) == len(TALLY.ids), "an ID twice across the run"
    summary = {
        "ids": len(TALLY.ids),
        "max_id": max(TALLY.ids),
        "numbers": TALLY.numbers,
        "increments": TALLY.increments,
        "queued": TALLY.queued,
    }
    print(f"all checks passed in {time.monotonic() - started:.1f} s")
    print(f"summary: {json.dumps(summary)}", flush=True)


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        import traceback

        traceback.print_exc()
        print(f"FAILED: {e}", file=sys.stderr)
        sys.exit(1)
