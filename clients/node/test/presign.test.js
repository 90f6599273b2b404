'use strict';
// Presigned URLs through the Node client against the real Ceph gateway (scripts/s3.sh): the
// gateway checks every signature itself. A dispatcher with the S3 store, one with files.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const crypto = require('node:crypto');
const os = require('node:os');
const path = require('node:path');
const { DispatcherClient, DispatcherError } = require('..');
const { freshDatabase, startDispatcher, stop, s3Storage } = require('./support');

const token = crypto.randomBytes(24).toString('hex');
const socketPath = path.join(os.tmpdir(), `dispatcher-node-presign-${process.pid}.sock`);
let s3;
let files;

before(async () => {
  const database = freshDatabase('presign');
  s3 = await startDispatcher({ token, socketPath: `${socketPath}.s3`, database, extra: s3Storage(`node-presign-${process.pid}`) });
  files = await startDispatcher({ token, socketPath, database });
});

after(async () => {
  for (const started of [s3, files]) if (started) assert.equal(await stop(started.child), 0);
});

const put = (url, headers, body) => fetch(url, { method: 'PUT', headers, body }).then((response) => response.status);

test('an upload goes straight to the bucket with exactly the signed length and type', async () => {
  const client = await DispatcherClient.connect({ host: '127.0.0.1', port: s3.port, token });
  const photo = crypto.randomBytes(5000);
  const upload = await client.presignUpload({ userId: 'u1', uploadId: 'up-node', contentType: 'image/jpeg', contentLength: photo.length });
  assert.deepEqual({ uploadId: upload.uploadId, ownerId: upload.ownerId, method: upload.method, headers: upload.headers },
    { uploadId: 'up-node', ownerId: 'u1', method: 'PUT',
      headers: { 'Content-Type': 'image/jpeg', 'Content-Length': String(photo.length), 'If-None-Match': '*' } });
  assert.equal(await put(upload.url, { ...upload.headers, 'Content-Type': 'image/png' }, photo), 403, 'another type');
  const longer = Buffer.concat([photo, Buffer.from([0])]);
  assert.equal(await put(upload.url, { 'Content-Type': 'image/jpeg', 'If-None-Match': '*' }, longer), 403, 'another length');
  // fetch sets Content-Length from the body itself.
  const { 'Content-Length': length, ...headers } = upload.headers;
  assert.equal(length, String(photo.length));
  assert.equal(await put(upload.url, headers, photo), 200);
  assert.equal(await put(upload.url, headers, photo), 412, 'an upload is never replaced');

  // A GET URL the gateway accepts (404: no body photo b1 was made; a bad signature would be 403).
  const view = await client.imageUrl({ userId: 'u1', kind: 'body', id: 'b1', expiresInSeconds: 60 });
  assert.equal(view.method, 'GET');
  assert.equal((await fetch(view.url)).status, 404);
  await assert.rejects(client.imageUrl({ userId: 'u1', kind: 'body', id: 'b1', expiresInSeconds: 901 }), { code: 'BAD_ARGUMENT' });
  await assert.rejects(
    client.presignUpload({ userId: 'u1', contentType: 'image/jpeg', contentLength: 60 * 1024 * 1024 + 1 }), { code: 'IMAGE_TOO_LARGE' });
  client.close();
});

test('a dispatcher whose images are files answers STORAGE_NOT_PRESIGNABLE', async () => {
  const client = await DispatcherClient.connect({ path: socketPath });
  await assert.rejects(client.presignUpload({ userId: 'u1', contentType: 'image/png', contentLength: 10 }), (error) => {
    assert.ok(error instanceof DispatcherError);
    assert.equal(error.code, 'STORAGE_NOT_PRESIGNABLE');
    assert.match(error.message, /FLEET_STORAGE=s3:\/\//);
    return true;
  });
  await assert.rejects(client.imageUrl({ userId: 'u1', kind: 'garment', id: 'g1' }), { code: 'STORAGE_NOT_PRESIGNABLE' });
  client.close();
});
