'use strict';
// index.d.ts against the dispatcher: every result interface a client method declares has the
// fields of a real answer, no more and no fewer (declared.js reads them from index.d.ts), and
// tsc --strict accepts a backend's use of the types without @types/node and refuses its mistakes
// (types/usage.ts). Its own database, a dispatcher, a drill worker and a render worker.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { execFileSync } = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { DispatcherClient } = require('..');
const { freshDatabase, startDispatcher, startWorker, stop, s3Storage } = require('./support');
const { methodResults, assertDeclared, checked } = require('./declared');

const repository = path.resolve(__dirname, '../../..');
const token = crypto.randomBytes(24).toString('hex');
const socketPath = path.join(os.tmpdir(), `dispatcher-node-types-${process.pid}.sock`);
const storageRoot = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-types-'));
let database;
let dispatcher;
let port;
// A second dispatcher on the same database with the S3 store, for the presigned URLs.
let s3Dispatcher;
let s3Port;
let workers = [];

before(async () => {
  database = freshDatabase('types');
  const extra = { FLEET_STORAGE_ROOT: storageRoot };
  ({ child: dispatcher, port } = await startDispatcher({ token, socketPath, database, extra }));
  ({ child: s3Dispatcher, port: s3Port } = await startDispatcher({
    token, socketPath: `${socketPath}.s3`, database, extra: s3Storage(`node-types-${process.pid}`),
  }));
  workers = ['fleet-drill', 'render-worker'].map((executable) => startWorker(executable, { database, extra }));
});

after(async () => {
  for (const worker of workers) assert.equal(await stop(worker), 0);
  if (dispatcher) assert.equal(await stop(dispatcher), 0);
  if (s3Dispatcher) assert.equal(await stop(s3Dispatcher), 0);
  fs.rmSync(storageRoot, { recursive: true, force: true });
});

const sql = (statement) => execFileSync('psql', [database, '-q', '-c', statement], { stdio: ['ignore', 'ignore', 'inherit'] });

test('tsc --strict accepts a backend using index.d.ts alone and refuses its mistakes', () => {
  let output;
  try {
    output = execFileSync('tsc', ['-p', path.join(__dirname, 'types', 'tsconfig.json')], { encoding: 'utf8' });
  } catch (error) {
    if (error.code === 'ENOENT') assert.fail('tsc is missing: apt-get install node-typescript (scripts/install-deps.sh)');
    assert.fail(`tsc refused:\n${error.stdout}${error.stderr}`);
  }
  assert.equal(output, '');
});

test('every result the client declares has the fields the dispatcher sends', async () => {
  const client = await DispatcherClient.connect({ host: '127.0.0.1', port, token });
  const as = (method, value, where = method) => { assertDeclared(methodResults.get(method), value, where); return value; };
  as('ping', await client.ping());
  as('auth', await client.auth(token));

  // Jobs, a graph, the image kinds (no image worker runs: they stay queued).
  const job = as('enqueue', await client.enqueue('drill.noop', {}, { delaySeconds: 3600, queue: 'typed' }));
  as('enqueueGraph', await client.enqueueGraph([{ name: 'a', kind: 'drill.noop' }, { name: 'b', kind: 'drill.noop', after: ['a'] }]));
  assertDeclared('EnqueuedJob', await client.normalizeImage({ userId: 'u1', uploadId: 'up1', target: 'body', imageId: 'b1' }), 'normalizeImage');
  as('processGarment', await client.processGarment({ userId: 'u1', uploadId: 'up2', garmentId: 'g1' }));
  as('purgeAccount', await client.purgeAccount('nobody'));
  const failing = await client.enqueue('drill.script', { failAttempts: 1 }, { maxAttempts: 1 });
  as('wait', await client.wait(failing.jobId, { timeoutMs: 60_000 }));
  as('status', await client.status(failing.jobId));
  as('getJob', await client.getJob(failing.jobId));
  as('wait', await client.wait(job.jobId, { timeoutMs: 1 }), 'wait (timed out)');
  as('cancel', await client.cancel(job.jobId));
  as('retryJob', await client.retryJob(job.jobId));
  // The retried job may already run on the drill worker: a cancel then ends it through the
  // worker, and only a finished job is discarded.
  await client.cancel(job.jobId);
  await client.wait(job.jobId, { timeoutMs: 60_000 });
  as('discardJob', await client.discardJob(job.jobId));
  as('listJobs', await client.listJobs({ states: ['dead'] }, { limit: 5 }));
  as('retryJobs', await client.retryJobs({ states: ['dead'] }, { limit: 10, dryRun: true }));
  as('discardJobs', await client.discardJobs({ states: ['dead'] }, { limit: 10, dryRun: true }));

  // The fleet: a pause, a limit and a live worker in the stats.
  as('pause', await client.pause({ queue: 'typed' }));
  as('setLimit', await client.setLimit({ key: 'tenant:typed', maxRunning: 3, rate: 10 }));
  as('limits', await client.limits());
  const stats = as('stats', await client.stats());
  assert.ok(stats.workers.length >= 1 && stats.pauses.length === 1 && stats.limits.length >= 1, JSON.stringify(stats));
  as('removeLimit', await client.removeLimit('tenant:typed'));
  as('resume', await client.resume({ queue: 'typed' }));
  as('listAudit', await client.listAudit({ limit: 5 }));

  // Renders: an onboarding one, linked; a user's on photos already made, complete, rated.
  const onboarding = as('issueToken', await client.issueToken());
  const free = as('requestRender', await client.requestRender({
    renderId: 'typed-free', ephemeralToken: onboarding.token, garmentId: 'g1', bodyPhotoId: 'b1', category: 'tops',
  }));
  as('linkAccount', await client.linkAccount({ ephemeralToken: onboarding.token, userId: 'typed' }));
  as('renderStatus', await client.renderStatus(free.id));
  for (const [file, source] of [['body/b1.jpg', 'Tests/Fixtures/corpus/honeywave-1080x1920.jpg'], ['garments/g1.jpg', 'scripts/demo/garment-on-plain-background.jpg']]) {
    fs.mkdirSync(path.dirname(path.join(storageRoot, 'typed', file)), { recursive: true });
    fs.copyFileSync(path.join(repository, source), path.join(storageRoot, 'typed', file));
  }
  const paid = await client.requestRender({ renderId: 'typed-paid', userId: 'typed', garmentId: 'g1', bodyPhotoId: 'b1', category: 'tops' });
  const done = as('waitRender', await client.waitRender(paid.id, { timeoutMs: 60_000 }));
  assert.equal(done.render.status, 'complete', JSON.stringify(done.render));
  as('renderFeedback', await client.renderFeedback({ renderId: paid.id, userId: 'typed', vote: 'down' }));
  as('listRenders', await client.listRenders('typed'));
  as('credits', await client.credits('typed'));
  as('retryRenders', await client.retryRenders({ errorCode: 'RENDER_FAILED', dryRun: true }));
  sql("INSERT INTO subscriptions (user_id, status, started_at, expires_at) VALUES ('typed-sub', 'subscribed', now(), now() + interval '30 days')");
  const subscribed = as('credits', await client.credits('typed-sub'), 'credits (subscribed)');
  assert.equal(subscribed.subscribed, true);
  client.close();

  // Presigned URLs, from the dispatcher whose store is S3.
  const s3Client = await DispatcherClient.connect({ host: '127.0.0.1', port: s3Port, token });
  as('presignUpload', await s3Client.presignUpload({ userId: 'typed', contentType: 'image/jpeg', contentLength: 1000 }));
  as('imageUrl', await s3Client.imageUrl({ userId: 'typed', kind: 'render', id: paid.id }));
  s3Client.close();

  const unchecked = [...new Set(methodResults.values())].filter((name) => !checked.has(name));
  assert.deepEqual(unchecked, [], 'declared results no answer was compared with');
  assert.ok(checked.has('CreditSubscription') && checked.has('WorkerStats') && checked.has('LimitView') && checked.has('QueuePause'));
});
