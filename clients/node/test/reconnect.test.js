'use strict';
// Reconnection against a real dispatcher that is killed (SIGKILL) and started again on the same
// port: DISPATCHER_BIN_DIR holds the built executables, DATABASE_URL an existing database.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { spawn, execFileSync } = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const { DispatcherClient, DispatcherError, ConnectionClosedError, ConnectionLostError, NotConnectedError } = require('..');

const { binDir, databaseURL, sleep, freePort, exited } = require('./support');

const token = crypto.randomBytes(24).toString('hex');
const environment = () => ({ ...process.env, DATABASE_URL: databaseURL, FLEET_LOG_LEVEL: 'error' }); // restarts log skipped schedule slots



/** Settles with the promise, or rejects after `ms`: a request that hangs fails the test. */
function bounded(promise, ms, what) {
  let timer;
  return Promise.race([
    promise.finally(() => clearTimeout(timer)),
    new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`${what} did not settle within ${ms} ms`)), ms); }),
  ]);
}

/** A dispatcher on fixed ports, killed with SIGKILL and started again on the same ones. */
class Dispatcher {
  constructor(extra = {}) {
    this.extra = extra;
    this.socketPath = path.join(os.tmpdir(), `dispatcher-node-reconnect-${process.pid}-${crypto.randomBytes(4).toString('hex')}.sock`);
  }

  async start() {
    this.port ??= await freePort();
    this.httpPort ??= await freePort();
    this.child = spawn(path.join(binDir, 'dispatcher'), ['run'], {
      env: {
        ...environment(), FLEET_DISPATCHER_TCP: `127.0.0.1:${this.port}`, FLEET_DISPATCHER_SOCKET: this.socketPath,
        FLEET_DISPATCHER_TOKEN: token, FLEET_HTTP_ADDRESS: `127.0.0.1:${this.httpPort}`, ...this.extra,
      },
      stdio: ['ignore', 'inherit', 'inherit'],
    });
    const deadline = Date.now() + 60_000;
    for (;;) {
      try {
        (await DispatcherClient.connect({ path: this.socketPath, reconnect: false })).close();
        return;
      } catch (error) {
        if (Date.now() > deadline || this.child.exitCode !== null) throw new Error(`the dispatcher did not start: ${error}`);
        await sleep(100);
      }
    }
  }

  async kill() {
    this.child.kill('SIGKILL');
    await exited(this.child);
  }

  /** Stops it (SIGTERM) if it runs, and removes the socket file a SIGKILL left behind. */
  async stop() {
    if (this.child.exitCode === null && this.child.signalCode === null) {
      this.child.kill('SIGTERM');
      assert.equal(await exited(this.child), 0);
    }
    fs.rmSync(this.socketPath, { force: true });
  }

  connect(options = {}) {
    return DispatcherClient.connect({ host: '127.0.0.1', port: this.port, token, ...options });
  }
}

/** A TCP proxy in front of the dispatcher: counts connections and the frames each sends, can hold
 * the client's frames back (in flight, never delivered) and break every connection. */
class Proxy {
  constructor(target) {
    this.target = target;
    this.connections = [];
    this.hold = false;
    this.server = net.createServer((client) => {
      const record = { client, upstream: net.createConnection({ host: '127.0.0.1', port: target.port }), frames: 0 };
      this.connections.push(record);
      client.on('error', () => {});
      record.upstream.on('error', () => client.destroy());
      client.on('close', () => record.upstream.destroy());
      record.upstream.on('close', () => client.destroy());
      record.upstream.pipe(client);
      client.on('data', (data) => {
        record.frames += data.toString('utf8').split('\n').length - 1;
        if (!this.hold) record.upstream.write(data);
      });
    });
  }

  listen() {
    return new Promise((resolve) => this.server.listen(0, '127.0.0.1', () => { this.port = this.server.address().port; resolve(); }));
  }

  breakAll() {
    for (const { client, upstream } of this.connections) { client.destroy(); upstream.destroy(); }
  }

  close() {
    this.breakAll();
    return new Promise((resolve) => this.server.close(resolve));
  }
}

const dispatcher = new Dispatcher();

before(async () => {
  await dispatcher.start();
});

after(async () => {
  await dispatcher.stop();
});

test('poolSize 3 opens three connections, authenticated, and spreads calls over them round-robin', async () => {
  const proxy = new Proxy(dispatcher);
  await proxy.listen();
  const client = await DispatcherClient.connect({ port: proxy.port, token, poolSize: 3 });
  try {
    assert.equal(proxy.connections.length, 3);
    const before = proxy.connections.map((c) => c.frames);
    assert.deepEqual(before, [1, 1, 1]); // each its own auth
    await Promise.all(Array.from({ length: 30 }, () => client.status(987654321).catch((error) => error.code)));
    assert.deepEqual(proxy.connections.map((c) => c.frames - 1), [10, 10, 10]);
    assert.equal((await client.enqueue('drill.noop', {}, { delaySeconds: 3600 })).isNew, true); // authenticated on each
  } finally {
    client.close();
    await proxy.close();
  }
});

test('in flight when the connection breaks: safe requests are sent again, the others reject with CONNECTION_LOST', async () => {
  const proxy = new Proxy(dispatcher);
  await proxy.listen();
  const client = await DispatcherClient.connect({ port: proxy.port, token, backoff: { initialMs: 10, maxMs: 100 } });
  const disconnects = [];
  const reconnects = [];
  client.on('disconnect', (error) => disconnects.push(error));
  client.on('reconnect', (greeting) => reconnects.push(greeting));
  try {
    const job = await client.enqueue('drill.noop', {}, { delaySeconds: 3600 });
    const key = `lost-${crypto.randomBytes(6).toString('hex')}`;
    proxy.hold = true; // written to the socket, never reaching the dispatcher
    const unkeyed = client.enqueue('drill.noop', {}, { delaySeconds: 3600 }).then(() => 'ok', (error) => error);
    const cancel = client.cancel(job.jobId).then(() => 'ok', (error) => error);
    const keyed = client.enqueue('drill.noop', { n: 1 }, { delaySeconds: 3600, idempotencyKey: key });
    const status = client.status(job.jobId);
    const render = client.requestRender({ renderId: `${key}-r`, userId: `${key}-broke`, garmentId: 'g', bodyPhotoId: 'b', category: 'tops' })
      .then(() => 'ok', (error) => error.code);
    await sleep(200);
    assert.equal(proxy.connections[0].frames, 7); // auth, enqueue, and the five above
    proxy.hold = false;
    proxy.breakAll();
    const lost = await bounded(unkeyed, 10_000, 'the unkeyed enqueue');
    assert.ok(lost instanceof ConnectionLostError, String(lost));
    assert.equal(lost.code, 'CONNECTION_LOST');
    assert.equal(lost.op, 'enqueue');
    assert.match(lost.message, /may or may not have been applied/);
    const lostCancel = await bounded(cancel, 10_000, 'the cancel');
    assert.ok(lostCancel instanceof ConnectionLostError && lostCancel.op === 'cancel');
    const sent = await bounded(keyed, 10_000, 'the keyed enqueue');
    assert.equal(sent.isNew, true);
    assert.equal((await bounded(status, 10_000, 'the status')).state, 'available');
    assert.equal(await bounded(render, 10_000, 'the render request'), 'INSUFFICIENT_CREDITS'); // answered, not lost
    assert.equal((await client.status(sent.jobId)).idempotencyKey, key);
    assert.equal(disconnects.length, 1);
    assert.ok(disconnects[0] instanceof ConnectionClosedError);
    assert.equal(reconnects.length, 1);
    assert.equal(reconnects[0].protocol, 'wearbloom-dispatcher');
    assert.equal(proxy.connections.length, 2);
    await client.cancel(job.jobId);
    await client.cancel(sent.jobId);
  } finally {
    client.close();
    await proxy.close();
  }
});

test('kill -9 and restart under a stream of requests: every request settles, safe ones succeed, none is lost', async () => {
  const client = await dispatcher.connect({ poolSize: 3, reconnectTimeoutMs: 60_000 });
  const reconnects = [];
  client.on('reconnect', (greeting) => reconnects.push(greeting));
  const anchor = await client.enqueue('drill.noop', {}, { delaySeconds: 3600 });
  const run = crypto.randomBytes(6).toString('hex');
  const keyed = new Map(); // key → job id
  const counts = { status: 0, ping: 0, keyed: 0, unkeyedOk: 0, unkeyedLost: 0, unkeyedIds: [] };
  let stop = false;
  const loop = async (n) => {
    for (let i = 0; !stop; i++) {
      const kind = (n + i) % 4;
      const what = `loop ${n} request ${i}`;
      if (kind === 0) {
        assert.equal((await bounded(client.status(anchor.jobId), 90_000, what)).state, 'available');
        counts.status++;
      } else if (kind === 1) {
        assert.equal((await bounded(client.ping(), 90_000, what)).pong, true);
        counts.ping++;
      } else if (kind === 2) {
        const key = `stream-${run}-${n}-${i}`;
        const job = await bounded(client.enqueue('drill.noop', { n, i }, { delaySeconds: 3600, idempotencyKey: key }), 90_000, what);
        keyed.set(key, job.jobId);
        counts.keyed++;
      } else {
        try {
          const job = await bounded(client.enqueue('drill.noop', { n, i }, { delaySeconds: 3600 }), 90_000, what);
          counts.unkeyedOk++;
          counts.unkeyedIds.push(job.jobId);
        } catch (error) {
          if (!(error instanceof ConnectionLostError)) throw error;
          assert.equal(error.code, 'CONNECTION_LOST');
          counts.unkeyedLost++;
        }
      }
    }
  };
  try {
    const loops = Array.from({ length: 20 }, (_, n) => loop(n));
    await sleep(1000);
    const before = counts.keyed;
    await dispatcher.kill();
    await sleep(1000);
    await dispatcher.start();
    // Let the stream run on the new process before stopping it.
    const restartedAt = counts.keyed;
    const deadline = Date.now() + 30_000;
    while ((counts.keyed < restartedAt + 40 || reconnects.length < 3) && Date.now() < deadline) await sleep(100);
    stop = true;
    await Promise.all(loops);
    assert.ok(before > 0 && counts.keyed > restartedAt, `requests went through before the kill (${before}) and after the restart (${counts.keyed - restartedAt})`);
    assert.ok(reconnects.length >= 3, `each pooled connection reconnected (${reconnects.length})`);
    assert.equal(new Set(keyed.values()).size, keyed.size, 'one job per idempotency key');
    for (const [key, jobId] of keyed) {
      const status = await client.status(jobId);
      assert.equal(status.idempotencyKey, key);
      assert.equal(status.state, 'available');
    }
    assert.equal(new Set(counts.unkeyedIds).size, counts.unkeyedIds.length);
    console.log('stream:', JSON.stringify({ ...counts, unkeyedIds: counts.unkeyedIds.length, reconnects: reconnects.length }));
  } finally {
    stop = true;
    client.close();
  }
});

test('a wait survives kill -9 and restart: it resolves with the job\'s final state', async () => {
  const client = await dispatcher.connect();
  const reconnected = new Promise((resolve) => client.once('reconnect', resolve));
  try {
    const job = await client.enqueue('drill.noop', {}, { delaySeconds: 3600 });
    const waited = client.wait(job.jobId, { timeoutMs: 120_000 });
    await sleep(200);
    await dispatcher.kill();
    await sleep(1000);
    await dispatcher.start();
    await bounded(reconnected, 30_000, 'the reconnection');
    await sleep(300);
    const other = await dispatcher.connect();
    assert.equal((await other.cancel(job.jobId)).outcome, 'cancelled');
    other.close();
    const result = await bounded(waited, 30_000, 'the wait');
    assert.equal(result.timedOut, false);
    assert.equal(result.job.state, 'cancelled');
    assert.equal(result.job.id, job.jobId);
  } finally {
    client.close();
  }
});

test('a connection-level error frame rejects what was in flight with it (not sent again); the next call reconnects', async () => {
  const client = await dispatcher.connect();
  const reconnected = new Promise((resolve) => client.once('reconnect', resolve));
  try {
    const huge = client.call('ping', { padding: 'x'.repeat(2 * 1024 * 1024) });
    await assert.rejects(bounded(huge, 10_000, 'the huge ping'), (error) => error instanceof DispatcherError && error.code === 'FRAME_TOO_LARGE');
    assert.equal((await bounded(client.ping(), 10_000, 'the next ping')).pong, true);
    await reconnected;
  } finally {
    client.close();
  }
});

test('a revoked token: the reconnection\'s UNAUTHENTICATED rejects waiting calls instead of retrying forever', async () => {
  const name = `node-revoked-${crypto.randomBytes(4).toString('hex')}`;
  const submitToken = execFileSync(path.join(binDir, 'dispatcher'), ['access-token', 'create', '--name', name, '--role', 'submit'],
    { env: environment() }).toString().trim();
  await sleep(3000); // every dispatcher re-reads the tokens within 2 s
  const client = await dispatcher.connect({ token: submitToken, reconnectTimeoutMs: 20_000 });
  try {
    assert.equal((await client.ping()).pong, true);
    execFileSync(path.join(binDir, 'dispatcher'), ['access-token', 'revoke', '--name', name], { env: environment() });
    await sleep(3000);
    await assert.rejects(bounded(client.status(1), 10_000, 'the first status'), { code: 'UNAUTHENTICATED' });
    const started = Date.now();
    await assert.rejects(bounded(client.status(1), 10_000, 'the second status'),
      (error) => error instanceof DispatcherError && error.code === 'UNAUTHENTICATED');
    assert.ok(Date.now() - started < 10_000);
  } finally {
    client.close();
  }
});

test('reconnect: false rejects with ConnectionClosedError after a kill', async () => {
  const client = await dispatcher.connect({ reconnect: false });
  try {
    const job = await client.enqueue('drill.noop', {}, { delaySeconds: 3600 });
    const waited = client.wait(job.jobId, { timeoutMs: 60_000 }).then(() => null, (error) => error);
    await sleep(200);
    await dispatcher.kill();
    const error = await bounded(waited, 10_000, 'the wait');
    assert.ok(error instanceof ConnectionClosedError, String(error));
    await assert.rejects(bounded(client.status(job.jobId), 10_000, 'a later status'), ConnectionClosedError);
  } finally {
    client.close();
    await dispatcher.start();
  }
});

test('an idle close reconnects on the next call; with the dispatcher down a call rejects NOT_CONNECTED after reconnectTimeoutMs', async () => {
  const idle = new Dispatcher({ FLEET_DISPATCHER_IDLE_TIMEOUT_SECONDS: '1' });
  await idle.start();
  let client;
  try {
    client = await idle.connect({ reconnectTimeoutMs: 1500 });
    const disconnects = [];
    const reconnects = [];
    client.on('disconnect', (error) => disconnects.push(error));
    client.on('reconnect', (greeting) => reconnects.push(greeting));
    await sleep(2000);
    assert.equal(disconnects.length, 1);
    assert.equal(disconnects[0].code, 'IDLE_TIMEOUT');
    assert.equal(reconnects.length, 0); // not before it is needed
    assert.equal((await bounded(client.ping(), 10_000, 'the ping after the idle close')).pong, true);
    assert.equal(reconnects.length, 1);
    assert.equal(client.greeting, reconnects[0]);

    await idle.kill();
    const started = Date.now();
    const error = await bounded(client.status(1).then(() => null, (error) => error), 10_000, 'the status with the dispatcher down');
    const elapsed = Date.now() - started;
    assert.ok(error instanceof NotConnectedError, String(error));
    assert.equal(error.code, 'NOT_CONNECTED');
    assert.equal(error.cause?.code, 'ECONNREFUSED');
    assert.ok(elapsed >= 1000 && elapsed < 5000, `rejected after ${elapsed} ms`);
  } finally {
    client?.close();
    await idle.stop();
  }
});

test('close() rejects requests waiting for a connection with ConnectionClosedError and stops reconnecting', async () => {
  const down = new Dispatcher();
  await down.start();
  const client = await down.connect();
  await down.kill();
  const pending = client.ping();
  await sleep(300);
  client.close();
  await assert.rejects(bounded(pending, 5000, 'the ping'), ConnectionClosedError);
  await assert.rejects(client.ping(), ConnectionClosedError);
  await down.stop();
});
