#!/usr/bin/env node
// Node.js's Redis clients, unchanged and in their default configuration, against
// segmint's Redis listener (run by tests/resp_clients.rs, with the packages of
// scripts/node-clients/package.json on NODE_PATH):
//
//     node tests/resp_clients.js            (SEGMINT_RESP_PORT, SEGMINT_ORDER_TOKEN,
//                                            SEGMINT_CHAT_TOKEN in the environment)
//
// The server's `[resp] keys` table must name `order_id` → biz `order` (IDs) and
// `msg_seq:` → biz `chat` (a sequence biz); the order token is granted `order` only,
// the chat token `chat` only.
//
// ioredis with its default options (its ready check sends INFO and reads `loading`),
// and node-redis 5 in RESP2 and RESP3, each: connect with a token, `info()`, INCR of
// an ID key and of a sequence key, a pipeline, MULTI/EXEC, CLIENT ID and LIST, and 500
// concurrent INCRs with no ID twice. It prints what it checked, then one line
// `summary: {json}` of the IDs and numbers it took. Any mismatch throws, and the
// script exits non-zero.

"use strict";

const assert = require("node:assert/strict");
const crypto = require("node:crypto");
const Redis = require("ioredis");
const { createClient } = require("redis");

const port = Number(process.env.SEGMINT_RESP_PORT);
const tokens = {
  order: process.env.SEGMINT_ORDER_TOKEN,
  chat: process.env.SEGMINT_CHAT_TOKEN,
};
assert.ok(port && tokens.order && tokens.chat, "SEGMINT_RESP_PORT and the tokens");
const unique = crypto.randomBytes(4).toString("hex");

const tally = { ids: new Set(), numbers: 0 };

function check(what) {
  console.log(`ok: ${what}`);
}

function tookIds(ids) {
  for (const id of ids) {
    const n = Number(id);
    assert.ok(Number.isSafeInteger(n) && n > 0, `an ID: ${id}`);
    assert.ok(!tally.ids.has(n), `ID ${n} answered twice`);
    tally.ids.add(n);
  }
}

/** INFO's text: its `# Section` headers and its `field:value` lines. */
function parseInfo(text, who) {
  assert.equal(typeof text, "string", `${who}: INFO is text`);
  const lines = text.split("\r\n");
  const headers = lines.filter((l) => l.startsWith("# ")).map((l) => l.slice(2));
  const fields = Object.fromEntries(
    lines
      .filter((l) => l.includes(":"))
      .map((l) => [l.slice(0, l.indexOf(":")), l.slice(l.indexOf(":") + 1)]),
  );
  return { headers, fields };
}

/** All of INFO, as Redis writes it; its fields. */
function checkInfo(text, who) {
  const { headers, fields } = parseInfo(text, who);
  for (const header of ["Server", "Clients", "Persistence", "Stats", "Replication"]) {
    assert.ok(headers.includes(header), `${who}: INFO lacks # ${header}:\n${text}`);
  }
  assert.equal(fields.redis_mode, "standalone", who);
  assert.equal(fields.loading, "0", who);
  assert.equal(fields.role, "master", who);
  assert.ok(/^\d+\.\d+\.\d+$/.test(fields.redis_version), `${who}: ${fields.redis_version}`);
  assert.ok(Number(fields.connected_clients) >= 1, `${who}: ${fields.connected_clients}`);
  assert.ok(Number(fields.total_commands_processed) >= 1, who);
  return fields;
}

/** One section of INFO; its fields. */
function checkSection(text, section, who) {
  const { headers, fields } = parseInfo(text, who);
  assert.deepEqual(headers, [section], `${who}: INFO ${section}:\n${text}`);
  return fields;
}

/** 500 INCRs of `order_id` sent at once: 500 distinct IDs. */
async function concurrent(incr, who) {
  const ids = await Promise.all(Array.from({ length: 500 }, () => incr("order_id")));
  assert.equal(new Set(ids.map(Number)).size, 500, `${who}: 500 concurrent INCRs`);
  tookIds(ids);
}

async function ioredis() {
  // Default options: the ready check on (INFO at connect), offline queue, retries.
  const order = new Redis({ port, password: tokens.order });
  const chat = new Redis({ port, password: tokens.chat });
  try {
    await Promise.all([order, chat].map((c) => new Promise((ok, fail) => {
      c.once("ready", ok);
      c.once("error", fail);
    })));
    assert.equal(order.status, "ready");
    check("ioredis: default options, ready check on: ready");
    const info = checkInfo(await order.info(), "ioredis info()");
    const server = checkSection(await order.info("server"), "Server", "ioredis");
    assert.equal(server.tcp_port, String(port));
    assert.ok(info.segmint_version, "segmint_version");
    check("ioredis: info(), info('server')");

    const id = await order.incr("order_id");
    tookIds([id]);
    const key = `msg_seq:io-${unique}`;
    assert.equal(await chat.incr(key), 1);
    assert.equal(await chat.incrby(key, 4), 5);
    tally.numbers += 5;
    check("ioredis: INCR of an ID key and of a sequence key");

    const piped = await order.pipeline().incr("order_id").incr("order_id").ping().exec();
    assert.deepEqual(piped.map(([e]) => e), [null, null, null]);
    assert.equal(piped[2][1], "PONG");
    tookIds([piped[0][1], piped[1][1]]);
    const multi = await chat.multi().incr(key).incr(key).exec();
    assert.deepEqual(multi, [[null, 6], [null, 7]]);
    tally.numbers += 2;
    check("ioredis: a pipeline, MULTI/EXEC");

    const [mine, theirs] = [await order.client("ID"), await chat.client("ID")];
    assert.notEqual(mine, theirs, "CLIENT ID per connection");
    const list = await order.client("LIST");
    assert.ok(list.includes(`id=${mine} `) && !list.includes(`id=${theirs} `), list);
    check("ioredis: CLIENT ID distinct, CLIENT LIST of its token's connections");

    await concurrent((k) => order.incr(k), "ioredis");
    check("ioredis: 500 concurrent INCRs, no ID twice");
  } finally {
    order.disconnect();
    chat.disconnect();
  }
}

async function nodeRedis(resp) {
  const options = (token) => ({
    socket: { host: "127.0.0.1", port, reconnectStrategy: false },
    password: token,
    RESP: resp,
  });
  const order = createClient(options(tokens.order));
  const chat = createClient(options(tokens.chat));
  const who = `node-redis RESP${resp}`;
  for (const c of [order, chat]) {
    c.on("error", (e) => console.error(`${who}: ${e}`));
  }
  try {
    await order.connect();
    await chat.connect();
    check(`${who}: connect with a token (${resp === 3 ? "HELLO 3 AUTH" : "AUTH"}, CLIENT SETINFO)`);
    const info = checkInfo(await order.info(), `${who} info()`);
    assert.equal(info.tcp_port, String(port));
    const stats = checkSection(await order.info("stats"), "Stats", who);
    assert.ok(Number(stats.total_connections_received) >= 2, who);
    check(`${who}: info(), info('stats')`);

    tookIds([await order.incr("order_id")]);
    const key = `msg_seq:nr${resp}-${unique}`;
    assert.equal(await chat.incr(key), 1);
    assert.equal(await chat.incrBy(key, 4), 5);
    tally.numbers += 5;
    check(`${who}: INCR of an ID key and of a sequence key`);

    const piped = await order.multi().incr("order_id").incr("order_id").execAsPipeline();
    tookIds(piped);
    assert.deepEqual(await chat.multi().incr(key).incr(key).exec(), [6, 7]);
    tally.numbers += 2;
    check(`${who}: a pipeline, MULTI/EXEC`);

    const mine = await order.clientId();
    const listed = await order.clientList();
    const me = listed.find((c) => c.id === mine);
    assert.ok(me, `${who}: CLIENT LIST lacks ${mine}: ${JSON.stringify(listed)}`);
    assert.equal(me.libName, "node-redis", "CLIENT SETINFO LIB-NAME shown");
    assert.equal(me.resp, resp);
    assert.notEqual(await chat.clientId(), mine);
    check(`${who}: CLIENT ID, CLIENT LIST with its library`);

    await concurrent((k) => order.incr(k), who);
    check(`${who}: 500 concurrent INCRs, no ID twice`);
  } finally {
    await order.close();
    await chat.close();
  }
}

async function main() {
  console.log(`ioredis ${require("ioredis/package.json").version}, node-redis ${require("redis/package.json").version}`);
  await ioredis();
  await nodeRedis(2);
  await nodeRedis(3);
  console.log(`summary: ${JSON.stringify({ ids: tally.ids.size, max_id: Math.max(...tally.ids), numbers: tally.numbers })}`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
