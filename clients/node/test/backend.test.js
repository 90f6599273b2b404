'use strict';
// The backend quickstart (docs/backend.md) run whole, as the app's backend drives the fleet:
// an onboarding token, its uploads written to storage, the render requested by upload ids and
// waited for, linking, the balance, a paid render, feedback and its refund, the mistakes a
// developer makes, and the purge. Against the built dispatcher, image-worker and render-worker
// (offline defaults: the libvips cut-out, the `local` provider) on DATABASE_URL.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { DispatcherClient, DispatcherError } = require('..');
const { freshDatabase, startDispatcher, startWorker, stop } = require('./support');

const repository = path.resolve(__dirname, '../../..');
const bodyPhoto = path.join(repository, 'Tests/Fixtures/corpus/honeywave-1080x1920.jpg');
const garmentPhoto = path.join(repository, 'scripts/demo/garment-on-plain-background.jpg');
const token = crypto.randomBytes(24).toString('hex');
const socketPath = path.join(os.tmpdir(), `dispatcher-node-backend-${process.pid}.sock`);
const storageRoot = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-backend-'));
const run = crypto.randomBytes(4).toString('hex');
let dispatcher;
let workers;
let client;

before(async () => {
  // Its own database: its workers must not take the jobs of the test files running beside it.
  const database = freshDatabase('backend');
  const extra = { FLEET_STORAGE_ROOT: storageRoot };
  ({ child: dispatcher } = await startDispatcher({ token, socketPath, database, extra }));
  workers = ['image-worker', 'render-worker'].map((executable) => startWorker(executable, { database, extra }));
  client = await DispatcherClient.connect({ path: socketPath });
});

after(async () => {
  client?.close();
  for (const worker of workers ?? []) assert.equal(await stop(worker), 0);
  if (dispatcher) assert.equal(await stop(dispatcher), 0);
  fs.rmSync(storageRoot, { recursive: true, force: true });
});

/** Where the backend writes an upload's bytes: `{owner}/uploads/{uploadId}` below the storage root. */
function upload(owner, uploadId, photo) {
  const file = path.join(storageRoot, owner, 'uploads', uploadId);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.copyFileSync(photo, file);
}

/** Every file below `folder`, relative to it, sorted (walked by hand: Node 18's readdir has no `recursive`). */
function files(folder, prefix = '') {
  if (!fs.existsSync(folder)) return [];
  return fs.readdirSync(folder, { withFileTypes: true }).flatMap((entry) => entry.isDirectory()
    ? files(path.join(folder, entry.name), `${prefix}${entry.name}/`)
    : [`${prefix}${entry.name}`]).sort();
}

test('the backend quickstart: onboarding render, link, balance, paid render, feedback refund, purge', async () => {
  // 1. The app's first launch: an onboarding token; the photos go to the token's own tree.
  const onboarding = await client.issueToken();
  assert.match(onboarding.token, /^eph_/);
  upload(onboarding.tokenId, 'up-body', bodyPhoto);
  upload(onboarding.tokenId, 'up-garment', garmentPhoto);

  // 2. The free render, by upload ids: the fleet normalises, cuts out, then renders.
  const free = await client.requestRender({
    renderId: `free-${run}`, ephemeralToken: onboarding.token, garmentId: 'g1', bodyPhotoId: 'b1',
    bodyUploadId: 'up-body', garmentUploadId: 'up-garment', category: 'tops',
  });
  assert.deepEqual([free.status, free.userId, free.charged], ['pending', null, false]);
  const freeDone = await client.waitRender(free.id, { timeoutMs: 120_000 });
  assert.equal(freeDone.timedOut, false);
  assert.equal(freeDone.render.status, 'complete', JSON.stringify(freeDone.render));
  assert.equal(freeDone.render.resultPath, `${onboarding.tokenId}/renders/${free.id}.jpg`);
  assert.ok(fs.statSync(path.join(storageRoot, freeDone.render.resultPath)).size > 0);
  assert.equal(freeDone.render.garmentCutout, true);

  // 3. Feedback is a user's: before linking it is refused, saying so.
  const user = `user-${run}`;
  await assert.rejects(client.renderFeedback({ renderId: free.id, userId: user, vote: 'up' }),
    (error) => error instanceof DispatcherError && error.code === 'NOT_FOUND' && /link it first/.test(error.reason));

  // 4. Sign-up: the token joins the account, the render moves over, the free credits are granted once.
  assert.deepEqual(await client.credits(user),
    { userId: user, granted: 0, consumed: 0, reserved: 0, available: 0, subscribed: false, subscription: null });
  assert.deepEqual(await client.linkAccount({ ephemeralToken: onboarding.token, userId: user }),
    { userId: user, renderId: free.id, creditsGranted: 3 });
  assert.equal((await client.renderStatus(free.id)).userId, user);
  assert.deepEqual(await client.renderFeedback({ renderId: free.id, userId: user, vote: 'up' }), { renderId: free.id, vote: 'up', refunded: false });
  assert.equal((await client.credits(user)).available, 3);

  // 5. A paid render from the user's own uploads: a credit is reserved, then consumed.
  upload(user, 'up-body', bodyPhoto);
  upload(user, 'up-garment', garmentPhoto);
  const paid = await client.requestRender({
    renderId: `paid-${run}`, userId: user, garmentId: 'g2', bodyPhotoId: 'b2',
    bodyUploadId: 'up-body', garmentUploadId: 'up-garment', category: 'tops',
  });
  assert.equal(paid.charged, true);
  const during = await client.credits(user);
  // Reserved until it completes (or consumed already if it was quick): never both, never neither.
  assert.equal(during.reserved + during.consumed, 1, JSON.stringify(during));
  assert.equal(during.available, 2);
  const paidDone = await client.waitRender(paid.id, { timeoutMs: 120_000 });
  assert.equal(paidDone.render.status, 'complete', JSON.stringify(paidDone.render));
  assert.deepEqual(await client.credits(user),
    { userId: user, granted: 3, consumed: 1, reserved: 0, available: 2, subscribed: false, subscription: null });

  // 6. A thumbs-down gives the credit back, once.
  assert.equal((await client.renderFeedback({ renderId: paid.id, userId: user, vote: 'down', category: 'fit' })).refunded, true);
  assert.equal((await client.renderFeedback({ renderId: paid.id, userId: user, vote: 'down', category: 'fit' })).refunded, false);
  assert.equal((await client.credits(user)).available, 3);
  assert.deepEqual((await client.listRenders(user)).renders.map((render) => render.id), [paid.id, free.id]);

  // 7. The mistakes: a misspelt field and a vote that is none, each refused naming what is wrong;
  // nothing was reserved for them.
  await assert.rejects(client.requestRender({
    renderId: `typo-${run}`, userId: user, garmentId: 'g2', bodyPhotoId: 'b2', body_upload_id: 'up-body', category: 'tops',
  }), { code: 'BAD_ARGUMENT', reason: 'unknown field args.body_upload_id' });
  await assert.rejects(client.renderFeedback({ renderId: paid.id, userId: user, vote: 'thumbs-down' }),
    { code: 'BAD_ARGUMENT', reason: "args.vote: 'thumbs-down' is not one of up, down" });
  await assert.rejects(client.waitRender(paid.id, 5000), TypeError);
  await assert.rejects(client.renderStatus(`typo-${run}`), { code: 'NOT_FOUND' });
  assert.equal((await client.credits(user)).reserved, 0);

  // 8. Account deletion: one purge of the user deletes every file of its tree (uploads, photos,
  // garments, renders) and of the onboarding token's tree it linked (the free render's photos
  // and result), and the renders' rows.
  const trees = [user, onboarding.tokenId];
  const stored = trees.map((tree) => files(path.join(storageRoot, tree)));
  const made = (photoId, garmentId, renderId) => [`body/${photoId}.jpg`, `garments/${garmentId}.jpg`, `garments/${garmentId}_cutout.png`,
    `garments/${garmentId}_preview.jpg`, `renders/${renderId}.jpg`, 'uploads/up-body', 'uploads/up-garment'];
  assert.deepEqual(stored, [made('b2', 'g2', paid.id), made('b1', 'g1', free.id)]);
  const purge = await client.purgeAccount(user, { idempotencyKey: `purge-${user}` });
  const purged = await client.wait(purge.jobId, { timeoutMs: 60_000 });
  assert.equal(purged.job.state, 'completed');
  assert.deepEqual(purged.job.result, { filesDeleted: stored[0].length + stored[1].length });
  for (const tree of trees) assert.deepEqual(files(path.join(storageRoot, tree)), []);
  for (const render of [paid.id, free.id]) await assert.rejects(client.renderStatus(render), { code: 'NOT_FOUND' });
});
