'use strict';
// verifyCallback against the Standard Webhooks test vector and its failure modes, then the whole
// path: a render requested with a callbackUrl over the socket → a render-worker completes it (the
// offline `local` provider) → the dispatcher POSTs the signed event to a receiver here, which
// answers 503 once: the delivery comes again with the same webhook-id, and both verify.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { spawn, execFileSync } = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const http = require('node:http');
const os = require('node:os');
const path = require('node:path');
const { DispatcherClient, verifyCallback, CallbackVerificationError } = require('..');

// From the Standard Webhooks specification's reference libraries.
const vector = {
  secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
  id: 'msg_p5jXN8AQM9LWM0D4loKWxJek',
  timestamp: '1614265330',
  body: '{"test": 2432232314}',
  signature: 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
};
const vectorNow = 1614265330 * 1000;
const vectorHeaders = (signature = vector.signature) => ({ 'webhook-id': vector.id, 'webhook-timestamp': vector.timestamp, 'webhook-signature': signature });

test('verifyCallback accepts the Standard Webhooks vector and refuses what differs', () => {
  const verified = verifyCallback(vectorHeaders(), Buffer.from(vector.body), vector.secret, { now: vectorNow });
  assert.deepEqual(verified, { id: vector.id, timestamp: 1614265330, event: { test: 2432232314 } });
  // A rotation: the signature list carries one entry per secret, the receiver holds either.
  const other = `whsec_${crypto.randomBytes(24).toString('base64')}`;
  assert.equal(verifyCallback(vectorHeaders(`v1,AAAA ${vector.signature}`), vector.body, [other, vector.secret], { now: vectorNow }).id, vector.id);
  // Fetch Headers, as in a Next.js route handler.
  assert.equal(verifyCallback(new Headers(vectorHeaders()), vector.body, vector.secret, { now: vectorNow }).id, vector.id);

  const refused = (headers, body, secret, code) => assert.throws(
    () => verifyCallback(headers, body, secret, { now: vectorNow }),
    (error) => error instanceof CallbackVerificationError && error.code === code);
  refused(vectorHeaders(), vector.body, other, 'BAD_SIGNATURE');
  refused(vectorHeaders(), '{"test": 2432232315}', vector.secret, 'BAD_SIGNATURE');
  refused({ ...vectorHeaders(), 'webhook-id': 'msg_other' }, vector.body, vector.secret, 'BAD_SIGNATURE');
  refused({ ...vectorHeaders(), 'webhook-timestamp': '1614265631' }, vector.body, vector.secret, 'STALE_TIMESTAMP');
  refused({ ...vectorHeaders(), 'webhook-timestamp': 'yesterday' }, vector.body, vector.secret, 'BAD_TIMESTAMP');
  refused({ 'webhook-id': vector.id, 'webhook-timestamp': vector.timestamp }, vector.body, vector.secret, 'MISSING_HEADER');
  refused(vectorHeaders(), vector.body, 'not-a-secret', 'BAD_SECRET');
});

const { binDir, databaseURL, freePort, exited } = require('./support');

// A database of its own: the render worker here must not take other test files' renders.
const database = `node_callbacks_${process.pid}`;
const ownURL = (() => { const url = new URL(databaseURL); url.pathname = `/${database}`; return url.toString(); })();
const secret = `whsec_${crypto.randomBytes(32).toString('base64')}`;
const storageRoot = fs.mkdtempSync(path.join(os.tmpdir(), 'node-callbacks-'));
const socketPath = path.join(os.tmpdir(), `dispatcher-callbacks-${process.pid}.sock`);
const children = [];
let receiver;
let receiverPort;
/** Every delivery the receiver got, in order: headers, raw body, the status it answered. */
const deliveries = [];

before(async () => {
  execFileSync('psql', [databaseURL, '-q', '-c', `CREATE DATABASE ${database}`]);
  receiver = http.createServer((request, response) => {
    const chunks = [];
    request.on('data', (chunk) => chunks.push(chunk));
    request.on('end', () => {
      // The first delivery fails as a receiver's outage would: the fleet must come again.
      const status = deliveries.length === 0 ? 503 : 200;
      deliveries.push({ method: request.method, url: request.url, headers: request.headers, body: Buffer.concat(chunks), status });
      response.writeHead(status).end(status === 200 ? 'ok' : 'down for a moment');
    });
  });
  await new Promise((resolve) => receiver.listen(0, '127.0.0.1', resolve));
  receiverPort = receiver.address().port;
  const environment = { ...process.env, DATABASE_URL: ownURL, FLEET_LOG_LEVEL: 'warning', FLEET_STORAGE_ROOT: storageRoot, FLEET_POLL_INTERVAL_MS: '200' };
  children.push(spawn(path.join(binDir, 'dispatcher'), ['run'], {
    env: {
      ...environment, FLEET_DISPATCHER_TCP: 'off', FLEET_DISPATCHER_SOCKET: socketPath, FLEET_HTTP_ADDRESS: `127.0.0.1:${await freePort()}`,
      FLEET_OUTBOUND_HOSTS: `127.0.0.1:${receiverPort}`, FLEET_CALLBACK_SECRET: secret, FLEET_RETRY_BASE_MS: '300',
    },
    stdio: ['ignore', 'inherit', 'inherit'],
  }));
  children.push(spawn(path.join(binDir, 'render-worker'), ['run'], { env: environment, stdio: ['ignore', 'inherit', 'inherit'] }));
  const deadline = Date.now() + 60_000;
  for (;;) {
    try {
      (await DispatcherClient.connect({ path: socketPath })).close();
      return;
    } catch (error) {
      if (Date.now() > deadline || children[0].exitCode !== null) throw new Error(`the dispatcher did not start: ${error}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
});

after(async () => {
  for (const child of children) child.kill('SIGTERM');
  for (const child of children) assert.equal(await exited(child), 0);
  receiver?.close();
  fs.rmSync(storageRoot, { recursive: true, force: true });
  execFileSync('psql', [databaseURL, '-q', '-c', `DROP DATABASE IF EXISTS ${database} WITH (FORCE)`]);
});

test('a render requested with a callbackUrl calls back once it is complete, signed, and again with the same webhook-id after a 503', async () => {
  const client = await DispatcherClient.connect({ path: socketPath });
  const callbackUrl = `http://127.0.0.1:${receiverPort}/hooks/render?source=fleet`;
  // An onboarding render (free): its photos live in the token's tree.
  const { token, tokenId } = await client.issueToken();
  const corpus = path.join(__dirname, '..', '..', '..', 'Tests', 'Fixtures', 'corpus');
  fs.mkdirSync(path.join(storageRoot, tokenId, 'body'), { recursive: true });
  fs.mkdirSync(path.join(storageRoot, tokenId, 'garments'), { recursive: true });
  fs.copyFileSync(path.join(corpus, 'honeywave-1080x1920.jpg'), path.join(storageRoot, tokenId, 'body', 'b1.jpg'));
  fs.copyFileSync(path.join(corpus, 'colorfulcups-960x600-rgba.png'), path.join(storageRoot, tokenId, 'garments', 'g1_cutout.png'));

  // A URL outside the allow-list is refused before anything is created.
  await assert.rejects(client.requestRender({
    renderId: 'r-refused', ephemeralToken: token, garmentId: 'g1', bodyPhotoId: 'b1', category: 'tops', callbackUrl: 'http://169.254.169.254/latest/meta-data',
  }), { code: 'BAD_ARGUMENT' });
  // This dispatcher has no FLEET_HTTP_JOB_SECRET: http.request is refused, callbacks still work.
  await assert.rejects(client.enqueue('http.request', { url: `http://127.0.0.1:${receiverPort}/hooks/render`, body: { type: 'render.finished' } }),
    { code: 'BAD_ARGUMENT', message: /FLEET_HTTP_JOB_SECRET/ });

  await client.requestRender({ renderId: 'r-callback', ephemeralToken: token, garmentId: 'g1', bodyPhotoId: 'b1', category: 'tops', callbackUrl });
  const { render, timedOut } = await client.waitRender('r-callback', { timeoutMs: 30_000 });
  assert.equal(timedOut, false);
  assert.equal(render.status, 'complete', JSON.stringify(render));

  const deadline = Date.now() + 30_000;
  while (deliveries.length < 2 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
  // Nothing more comes once one was answered 200.
  await new Promise((resolve) => setTimeout(resolve, 1500));
  assert.equal(deliveries.length, 2, `deliveries: ${JSON.stringify(deliveries.map((d) => d.status))}`);
  assert.deepEqual(deliveries.map((d) => [d.method, d.url, d.status]), [['POST', '/hooks/render?source=fleet', 503], ['POST', '/hooks/render?source=fleet', 200]]);
  const [first, second] = deliveries.map((delivery) => verifyCallback(delivery.headers, delivery.body, secret));
  assert.equal(first.id, second.id);
  assert.equal(first.id, 'msg_cb_render_r-callback');
  for (const { event } of [first, second]) {
    assert.equal(event.type, 'render.finished');
    assert.equal(event.renderId, 'r-callback');
    assert.equal(event.status, 'complete');
    assert.equal(event.errorCode, null);
    assert.equal(event.resultPath, render.resultPath);
  }
  assert.equal(deliveries[0].headers['content-type'], 'application/json');
  // Another secret does not verify it.
  assert.throws(() => verifyCallback(deliveries[1].headers, deliveries[1].body, `whsec_${crypto.randomBytes(32).toString('base64')}`),
    { code: 'BAD_SIGNATURE' });
  client.close();
});
