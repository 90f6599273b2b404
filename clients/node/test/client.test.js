'use strict';
// Runs the client against a real dispatcher: DISPATCHER_BIN_DIR holds the built executables
// (dispatcher, fleet-drill), DATABASE_URL an existing, empty database. scripts/test.sh sets both.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { DispatcherClient, DispatcherError, ConnectionClosedError } = require('..');

const { binDir, databaseURL, exited, startDispatcher, startWorker } = require('./support');

const token = crypto.randomBytes(24).toString('hex');
const socketPath = path.join(os.tmpdir(), `dispatcher-node-${process.pid}.sock`);
let port;
let dispatcher;
const environment = () => ({ ...process.env, DATABASE_URL: databaseURL, FLEET_LOG_LEVEL: 'warning' });

before(async () => {
  ({ child: dispatcher, port } = await startDispatcher({ token, socketPath }));
});

after(async () => {
  dispatcher.kill('SIGTERM');
  assert.equal(await exited(dispatcher), 0);
  assert.equal(fs.existsSync(socketPath), false);
});

const tcp = (options = {}) => DispatcherClient.connect({ host: '127.0.0.1', port, token, ...options });

test('greets, and requires the token on TCP only', async () => {
  const client = await tcp();
  assert.equal(client.greeting.protocol, 'wearbloom-dispatcher');
  assert.equal(client.greeting.authRequired, true);
  assert.ok(client.greeting.ops.includes('wait'));
  assert.equal((await client.ping()).pong, true);
  client.close();

  const anonymous = await DispatcherClient.connect({ host: '127.0.0.1', port });
  await anonymous.ping();
  await assert.rejects(anonymous.enqueue('drill.noop'), { name: 'DispatcherError', code: 'UNAUTHENTICATED' });
  await assert.rejects(anonymous.auth('wrong'), (error) => error instanceof DispatcherError && error.code === 'UNAUTHENTICATED');
  await assert.rejects(anonymous.ping(), ConnectionClosedError);

  const local = await DispatcherClient.connect({ path: socketPath });
  assert.equal(local.greeting.authRequired, false);
  assert.equal((await local.enqueue('drill.noop')).isNew, true);
  local.close();
});

test('enqueue with options, status, and typed errors', async () => {
  const client = await tcp();
  const job = await client.enqueue('drill.script', { sleepMs: 1 }, { priority: 1, queue: 'bulk', maxAttempts: 2, delaySeconds: 60, idempotencyKey: `k-${port}` });
  assert.equal(job.kind, 'drill.script');
  const again = await client.enqueue('drill.script', {}, { idempotencyKey: `k-${port}` });
  assert.deepEqual(again, { ...job, isNew: false });
  const status = await client.status(job.jobId);
  assert.equal(status.state, 'available');
  assert.deepEqual(status.payload, { sleepMs: 1 });
  assert.equal(status.queue, 'bulk');
  assert.equal(status.finishedAt, null);
  assert.ok(!Number.isNaN(Date.parse(status.runAt)));
  await assert.rejects(client.status(987654321), { code: 'NOT_FOUND' });
  await assert.rejects(client.enqueue('image.resize'), { code: 'UNKNOWN_KIND' });
  await assert.rejects(client.enqueue('drill.noop', {}, { priority: 42 }), { code: 'BAD_ARGUMENT' });
  await assert.rejects(client.call('status', { jobId: 1, extra: true }), { code: 'BAD_ARGUMENT', reason: 'unknown field args.extra' });
  await assert.rejects(client.call('launch'), { code: 'UNKNOWN_OP' });
  client.close();
});

test('jobs run after others: waiting in status, a graph by local names, hostile dependencies refused', async () => {
  const client = await tcp();
  const first = await client.enqueue('drill.noop', {}, { delaySeconds: 3600 });
  const dependent = await client.enqueue('drill.noop', {}, { after: [first.jobId] });
  const status = await client.status(dependent.jobId);
  assert.equal(status.state, 'waiting');
  assert.deepEqual(status.after, [first.jobId]);
  assert.deepEqual(status.waitingOn, [first.jobId]);
  assert.equal((await client.stats()).kinds.find((k) => k.kind === 'drill.noop').waiting >= 1, true);
  const graph = await client.enqueueGraph([
    { name: 'render', kind: 'drill.noop', after: ['cutout', first.jobId] },
    { name: 'cutout', kind: 'drill.noop' },
  ], { idempotencyKey: `graph-${port}` });
  assert.deepEqual(graph.jobs.map((job) => job.name), ['render', 'cutout']);
  assert.equal(graph.isNew, true);
  const render = await client.status(graph.jobs[0].jobId);
  assert.deepEqual(render.waitingOn, [first.jobId, graph.jobs[1].jobId].sort((a, b) => a - b));
  assert.deepEqual(await client.enqueueGraph([
    { name: 'render', kind: 'drill.noop', after: ['cutout', first.jobId] }, { name: 'cutout', kind: 'drill.noop' },
  ], { idempotencyKey: `graph-${port}` }), { ...graph, isNew: false });
  await assert.rejects(client.enqueue('drill.noop', {}, { after: [987654321] }), { code: 'BAD_ARGUMENT' });
  await assert.rejects(client.enqueue('drill.noop', {}, { after: Array.from({ length: 101 }, (_, i) => i + 1) }), { code: 'BAD_ARGUMENT' });
  await assert.rejects(client.enqueueGraph([{ name: 'a', kind: 'drill.noop', after: ['a'] }]), { code: 'BAD_ARGUMENT' });
  await client.cancel(first.jobId);
  assert.equal((await client.status(dependent.jobId)).errors.at(-1).code, 'DEPENDENCY_FAILED');
  client.close();
});

test('a traceparent is sent with the request; a malformed one is refused before sending', async () => {
  const client = await tcp();
  const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
  const job = await client.enqueue('drill.noop', {}, undefined, { traceparent });
  assert.equal(job.kind, 'drill.noop');
  assert.equal((await client.call('ping', {}, { traceparent })).pong, true);
  await assert.rejects(client.call('ping', {}, { traceparent: '00-abc-01' }), TypeError);
  await assert.rejects(client.enqueue('drill.noop', {}, undefined, { traceparent: `00-${'0'.repeat(32)}-00f067aa0ba902b7-01` }), TypeError);
  client.close();
});

test('image operations enqueue the image worker kinds', async () => {
  const client = await tcp();
  const normalize = await client.normalizeImage({ userId: 'u1', uploadId: 'up1', target: 'body', imageId: 'b1' });
  const garment = await client.processGarment({ userId: 'u1', uploadId: 'up2', garmentId: 'g1' }, { priority: 0 });
  const purge = await client.purgeAccount('u1');
  assert.deepEqual([normalize.kind, garment.kind, purge.kind], ['image.normalize', 'image.normalize', 'account.purge']);
  assert.deepEqual((await client.status(garment.jobId)).payload, { userId: 'u1', uploadId: 'up2', target: 'garment', imageId: 'g1' });
  const cutout = await client.status(garment.cutoutJobId);
  assert.deepEqual([cutout.kind, cutout.state, cutout.after, cutout.priority], ['garment.cutout', 'waiting', [garment.jobId], 0]);
  assert.deepEqual(cutout.payload, { userId: 'u1', garmentId: 'g1' });
  await assert.rejects(client.purgeAccount('../../etc'), { code: 'BAD_ARGUMENT' });
  const thumb = await client.normalizeImage({ userId: 'u1', uploadId: 'up1', target: 'body', imageId: 'b2', profile: 'thumb' });
  assert.equal((await client.status(thumb.jobId)).payload.profile, 'thumb');
  assert.equal((await client.status(normalize.jobId)).payload.profile, undefined);
  await assert.rejects(client.normalizeImage({ userId: 'u1', uploadId: 'up1', target: 'body', imageId: 'b3', profile: 'poster' }),
    { code: 'BAD_ARGUMENT', reason: 'args.profile: unknown image profile "poster" (known: thumb, trial-room, upload)' });
  client.close();
});

test('pipelined calls resolve by id, out of order: a wait answered by a later cancel', async () => {
  const client = await tcp();
  const job = await client.enqueue('drill.noop', {}, { delaySeconds: 3600 });
  const order = [];
  const waited = client.wait(job.jobId, { timeoutMs: 30_000 }).then((result) => { order.push('wait'); return result; });
  const pings = Promise.all(Array.from({ length: 50 }, () => client.ping()));
  const cancelled = client.cancel(job.jobId).then((result) => { order.push('cancel'); return result; });
  assert.equal((await pings).length, 50);
  assert.deepEqual(await cancelled, { outcome: 'cancelled', state: 'cancelled', workerId: null });
  const result = await waited;
  assert.equal(result.timedOut, false);
  assert.equal(result.job.state, 'cancelled');
  assert.deepEqual(order, ['cancel', 'wait']);
  client.close();
});

test('wait returns when a worker completes the job, and times out otherwise', async () => {
  const client = await tcp();
  const late = await client.enqueue('drill.noop', {}, { delaySeconds: 3600 });
  const timedOut = await client.wait(late.jobId, { timeoutMs: 300 });
  assert.equal(timedOut.timedOut, true);
  assert.equal(timedOut.job.state, 'available');
  await client.cancel(late.jobId);

  const job = await client.enqueue('drill.noop');
  const waited = client.wait(job.jobId, { timeoutMs: 60_000 });
  const worker = startWorker('fleet-drill');
  try {
    const result = await waited;
    assert.equal(result.timedOut, false);
    assert.equal(result.job.state, 'completed');
    const stats = await client.stats();
    assert.ok(stats.workers.some((w) => w.executable === 'fleet-drill'));
    assert.ok(stats.kinds.find((k) => k.kind === 'drill.noop').completed >= 1);
  } finally {
    worker.kill('SIGTERM');
    await exited(worker);
  }
  client.close();
});

test('render ops: an onboarding token, its one render, linking, credits and business codes', async () => {
  const client = await tcp();
  const { token: onboarding, tokenId } = await client.issueToken();
  const render = await client.requestRender({ renderId: `onb-${port}`, ephemeralToken: onboarding, garmentId: 'g1', bodyPhotoId: 'b1', category: 'tops' });
  assert.equal(render.status, 'pending');
  assert.equal(render.userId, null);
  assert.equal(render.charged, false);
  assert.equal((await client.renderStatus(render.id)).id, render.id);
  // A misspelt field is sent as written and refused naming it: never dropped on the way.
  await assert.rejects(client.requestRender({ renderId: `typo-${port}`, ephemeralToken: onboarding, garmentId: 'g1', bodyPhotoId: 'b1', body_upload_id: 'up1', category: 'tops' }),
    { code: 'BAD_ARGUMENT', reason: 'unknown field args.body_upload_id' });
  await assert.rejects(client.renderStatus(`typo-${port}`), { code: 'NOT_FOUND' });
  await assert.rejects(client.waitRender(render.id, 200), TypeError);
  await assert.rejects(client.listJobs({}, { limt: 5 }), { code: 'BAD_ARGUMENT', reason: 'unknown field args.limt' });
  await assert.rejects(DispatcherClient.connect({ host: '127.0.0.1', port, tokn: token }), { name: 'TypeError', message: 'DispatcherClient.connect: unknown option tokn' });
  const waited = await client.waitRender(render.id, { timeoutMs: 200 });
  assert.equal(waited.timedOut, true);
  await assert.rejects(client.requestRender({ renderId: `onb2-${port}`, ephemeralToken: onboarding, garmentId: 'g1', bodyPhotoId: 'b1', category: 'tops' }),
    { code: 'TOKEN_ALREADY_USED' });
  await assert.rejects(client.requestRender({ renderId: 'x1', ephemeralToken: onboarding, ownerId: 'someone', garmentId: 'g1', bodyPhotoId: 'b1', category: 'tops' }),
    { code: 'BAD_ARGUMENT' });
  // Feedback moves credits, so it is a user's: before linking the refusal says to link first.
  await assert.rejects(client.renderFeedback({ renderId: render.id, userId: 'nobody', vote: 'down' }),
    { code: 'NOT_FOUND', reason: `render ${render.id} belongs to an onboarding token not linked yet: link it first (account.link), then send feedback as that user` });

  const user = `user-${port}`;
  assert.deepEqual(await client.linkAccount({ ephemeralToken: onboarding, userId: user }), { userId: user, renderId: render.id, creditsGranted: 3 });
  await assert.rejects(client.linkAccount({ ephemeralToken: onboarding, userId: 'other' }), { code: 'INVALID_TOKEN' });
  await assert.rejects(client.renderFeedback({ renderId: render.id, userId: user, vote: 'down', category: 'fit' }), { code: 'RENDER_NOT_COMPLETE' });
  assert.ok(tokenId.startsWith('eph-'));

  const paid = await client.requestRender({ renderId: `paid-${port}`, userId: user, garmentId: 'g1', bodyPhotoId: 'b1', category: 'dresses' });
  assert.equal(paid.charged, true);
  await assert.rejects(client.requestRender({ renderId: 'x2', userId: user, garmentId: 'g1', bodyPhotoId: 'b1', category: 'hats' }), { code: 'INVALID_CATEGORY' });
  await assert.rejects(client.requestRender({ renderId: 'x3', userId: `broke-${port}`, garmentId: 'g1', bodyPhotoId: 'b1', category: 'tops' }),
    { code: 'INSUFFICIENT_CREDITS' });
  // `after` names jobs that exist, as enqueue's does: nothing is reserved for a render that could never run.
  await assert.rejects(client.requestRender({ renderId: 'x4', userId: user, garmentId: 'g1', bodyPhotoId: 'b1', category: 'tops', after: [2 ** 40] }),
    { code: 'BAD_ARGUMENT', reason: `invalid job: after names job ${2 ** 40}, which does not exist` });
  assert.deepEqual((await client.listRenders(user)).renders.map((r) => r.id), [paid.id, render.id]);
  await assert.rejects(client.renderStatus('no-such-render'), { code: 'NOT_FOUND' });

  // At the provider's capacity a render is refused at once, nothing reserved or queued.
  assert.equal((await client.setLimit({ key: 'provider:local', maxRunning: 0 })).changed, true);
  const busy = await client.requestRender({ renderId: `busy-${port}`, userId: user, garmentId: 'g1', bodyPhotoId: 'b1', category: 'tops' })
    .then(() => assert.fail('admitted at no capacity'), (error) => error);
  assert.equal(busy.code, 'RENDER_BUSY');
  assert.ok(busy.retryAfterSeconds >= 1, `retryAfterSeconds ${busy.retryAfterSeconds}`);
  await assert.rejects(client.renderStatus(`busy-${port}`), { code: 'NOT_FOUND' });
  assert.deepEqual((await client.removeLimit('provider:local')).changed, true);
  client.close();
});

test('a render requested with its uploads runs after the jobs that make its photos', async () => {
  const client = await tcp();
  const user = `early-${port}`;
  const { token: onboarding } = await client.issueToken();
  assert.deepEqual((await client.linkAccount({ ephemeralToken: onboarding, userId: user })).creditsGranted, 3);
  const render = await client.requestRender({
    renderId: `early-${port}`, userId: user, garmentId: 'g9', bodyPhotoId: 'b9', bodyUploadId: 'up-b', garmentUploadId: 'up-g', category: 'tops',
  });
  assert.equal(render.status, 'pending');
  assert.equal(render.garmentCutout, null);
  // No image worker runs here: the render's job waits for the three input jobs.
  const job = await client.status(render.jobId);
  assert.equal(job.state, 'waiting');
  assert.equal(job.after.length, 3);
  const kinds = await Promise.all(job.after.map(async (id) => (await client.status(id)).kind));
  assert.deepEqual(kinds.sort(), ['garment.cutout', 'image.normalize', 'image.normalize']);
  await assert.rejects(client.requestRender({ renderId: 'x4', userId: user, garmentId: 'g9', bodyPhotoId: 'b9', garmentUploadId: '../up', category: 'tops' }),
    { code: 'BAD_ARGUMENT' });
  client.close();
});

test('job control with scoped tokens: a read token made by the CLI looks but may not act; the operator pauses, lists and is audited', async () => {
  const { execFileSync } = require('node:child_process');
  const readToken = execFileSync(path.join(binDir, 'dispatcher'), ['access-token', 'create', '--name', `node-reader-${port}`, '--role', 'read'],
    { env: environment() }).toString().trim();
  assert.match(readToken, /^wbt_[0-9a-f]{64}$/);
  await new Promise((resolve) => setTimeout(resolve, 3000)); // every dispatcher re-reads the tokens within 2 s
  const reader = await tcp({ token: readToken });
  assert.equal((await reader.stats()).windowSeconds, 3600);
  await assert.rejects(reader.pause({ kind: 'drill.script' }), { code: 'FORBIDDEN' });
  await assert.rejects(reader.enqueue('drill.noop'), { code: 'FORBIDDEN' });
  assert.equal((await reader.ping()).pong, true); // still open

  const operator = await tcp();
  const job = await operator.enqueue('drill.script', {}, { queue: `paused-${port}`, delaySeconds: 3600 });
  const paused = await operator.pause({ queue: `paused-${port}` });
  assert.equal(paused.changed, true);
  assert.ok(paused.pauses.some((pause) => pause.name === `paused-${port}` && pause.pausedBy === 'default'));
  const page = await reader.listJobs({ queues: [`paused-${port}`] }, { limit: 10 });
  assert.deepEqual(page.jobs.map((summary) => summary.id), [job.jobId]);
  assert.equal(page.nextCursor, null);
  await assert.rejects(operator.retryJob(job.jobId), { code: 'JOB_NOT_RETRYABLE' });
  assert.equal((await operator.resume({ queue: `paused-${port}` })).changed, true);
  const audit = await reader.listAudit({ limit: 5 });
  assert.deepEqual(audit.entries.slice(0, 2).map((entry) => [entry.action, entry.actor]), [['queue.resume', 'default'], ['queue.pause', 'default']]);
  reader.close();
  operator.close();
});
