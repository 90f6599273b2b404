// How a backend uses the client, type-checked by tsc with index.d.ts alone (test/types.test.js).
// Each @ts-expect-error is a mistake the types must refuse: tsc fails when one is accepted.
import {
  DispatcherClient, DispatcherError, verifyCallback, type CreditBalance, type Render, type RenderRequest, type QueueStats,
} from '../../index';

export async function backend(client: DispatcherClient): Promise<number> {
  const { token, tokenId } = await client.issueToken();
  const render: Render = await client.requestRender({
    renderId: 'r1', ephemeralToken: token, garmentId: 'g1', bodyPhotoId: 'b1', bodyUploadId: 'up1', garmentUploadId: 'up2', category: 'tops',
  });
  const waited = await client.waitRender(render.id, { timeoutMs: 35_000 });
  if (waited.render.status === 'failed') return 0;
  await client.linkAccount({ ephemeralToken: token, userId: 'u1' });
  await client.renderFeedback({ renderId: render.id, userId: 'u1', vote: 'down', category: 'fit' });
  const balance: CreditBalance = await client.credits('u1');
  const stats: QueueStats = await client.stats();
  client.on('disconnect', (error: Error) => error.message);
  client.once('reconnect', (greeting) => greeting.ops.length);
  try {
    await client.requestRender({ renderId: 'r2', userId: 'u1', garmentId: 'g1', bodyPhotoId: 'b1', category: 'tops' });
  } catch (error) {
    if (error instanceof DispatcherError && error.code === 'INSUFFICIENT_CREDITS') return -1;
  }
  const upload = await client.presignUpload({ ephemeralToken: token, contentType: 'image/heic', contentLength: 2_000_000 });
  const put: Record<string, string> = upload.headers;
  const view = await client.imageUrl({ userId: 'u1', kind: 'cutout', id: 'g1', expiresInSeconds: 60 });
  verifyCallback({ 'webhook-id': 'x' }, new Uint8Array(0), 'whsec_x');
  return balance.available + stats.limits.length + tokenId.length + (balance.subscription?.expiresAt?.length ?? 0)
    + upload.uploadId.length + Object.keys(put).length + view.url.length + (waited.render.resultUrl?.length ?? 0);
}

export function mistakes(client: DispatcherClient): void {
  // @ts-expect-error userId and ephemeralToken are exclusive
  const both: RenderRequest = { renderId: 'r', garmentId: 'g', bodyPhotoId: 'b', category: 'tops', userId: 'u1', ephemeralToken: 'eph_x' };
  // @ts-expect-error neither userId nor ephemeralToken
  const neither: RenderRequest = { renderId: 'r', garmentId: 'g', bodyPhotoId: 'b', category: 'tops' };
  // @ts-expect-error a misspelt field (body_upload_id) is no field of a render request
  client.requestRender({ renderId: 'r', userId: 'u1', garmentId: 'g', bodyPhotoId: 'b', category: 'tops', body_upload_id: 'up1' });
  // @ts-expect-error thumbs-down is not a vote
  client.renderFeedback({ renderId: 'r', userId: 'u1', vote: 'thumbs-down' });
  // @ts-expect-error a kind or a queue, not both
  client.pause({ kind: 'drill.noop', queue: 'bulk' });
  // @ts-expect-error a misspelt connect option
  DispatcherClient.connect({ host: '127.0.0.1', port: 7420, tsl: {} });
  // @ts-expect-error a GIF is no upload the image worker takes
  client.presignUpload({ userId: 'u1', contentType: 'image/gif', contentLength: 10 });
  // @ts-expect-error userId and ephemeralToken are exclusive
  client.presignUpload({ userId: 'u1', ephemeralToken: 'eph_x', contentType: 'image/png', contentLength: 10 });
  // @ts-expect-error an image is named by kind and id, never by a path
  client.imageUrl({ userId: 'u1', path: 'u1/body/b1.jpg' });
  void both;
  void neither;
}
