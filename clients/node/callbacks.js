'use strict';
// Verifies the fleet's signed calls (completion callbacks and http.request jobs), the Standard
// Webhooks way: `webhook-signature` holds `v1,<base64 HMAC-SHA256("id.timestamp.body")>` entries,
// one per secret the fleet signs with (two during a rotation); the secret is `whsec_<base64>`.

const crypto = require('node:crypto');

/** Why a call was not verified: `code` is MISSING_HEADER, BAD_TIMESTAMP, STALE_TIMESTAMP, BAD_SECRET or BAD_SIGNATURE. */
class CallbackVerificationError extends Error {
  constructor(code, message) {
    super(`${code}: ${message}`);
    this.name = 'CallbackVerificationError';
    this.code = code;
  }
}

function header(headers, name) {
  const value = typeof headers.get === 'function' ? headers.get(name) : headers[name] ?? Object.entries(headers)
    .find(([key]) => key.toLowerCase() === name)?.[1];
  return Array.isArray(value) ? value[0] : value ?? undefined;
}

function secretBytes(secret) {
  if (typeof secret !== 'string' || !secret.startsWith('whsec_')) throw new CallbackVerificationError('BAD_SECRET', 'the secret is not whsec_<base64>');
  const bytes = Buffer.from(secret.slice(6), 'base64');
  if (bytes.length < 16) throw new CallbackVerificationError('BAD_SECRET', 'the secret is shorter than 16 bytes');
  return bytes;
}

/**
 * Checks one call: `headers` as Node's `req.headers` (or a Fetch `Headers`), `body` the raw bytes
 * (Buffer or string) exactly as received, `secret` one `whsec_` secret or an array of them (a
 * rotation). Returns `{ id, timestamp, event }`: `id` is the `webhook-id`, the same on every
 * redelivery, so a receiver that stores it drops repeats; `event` is the parsed body (null when empty).
 * Throws CallbackVerificationError otherwise. `toleranceSeconds` (default 300) bounds the clock skew.
 */
function verifyCallback(headers, body, secret, { toleranceSeconds = 300, now = Date.now() } = {}) {
  const id = header(headers, 'webhook-id');
  const timestamp = header(headers, 'webhook-timestamp');
  const signatures = header(headers, 'webhook-signature');
  for (const [name, value] of [['webhook-id', id], ['webhook-timestamp', timestamp], ['webhook-signature', signatures]]) {
    if (!value) throw new CallbackVerificationError('MISSING_HEADER', `header ${name} missing`);
  }
  if (!/^\d+$/.test(timestamp)) throw new CallbackVerificationError('BAD_TIMESTAMP', 'webhook-timestamp is not whole epoch seconds');
  const skew = Math.round(now / 1000) - Number(timestamp);
  if (Math.abs(skew) > toleranceSeconds) throw new CallbackVerificationError('STALE_TIMESTAMP', `webhook-timestamp is ${skew} s away from now`);
  const bytes = Buffer.isBuffer(body) ? body : Buffer.from(body ?? '', 'utf8');
  const signed = Buffer.concat([Buffer.from(`${id}.${timestamp}.`, 'utf8'), bytes]);
  const offered = signatures.split(' ').filter((entry) => entry.startsWith('v1,')).map((entry) => Buffer.from(entry.slice(3), 'base64'));
  const matches = (Array.isArray(secret) ? secret : [secret]).some((candidate) => {
    const expected = crypto.createHmac('sha256', secretBytes(candidate)).update(signed).digest();
    return offered.some((signature) => signature.length === expected.length && crypto.timingSafeEqual(signature, expected));
  });
  if (!matches) throw new CallbackVerificationError('BAD_SIGNATURE', 'no v1 signature matches');
  return { id, timestamp: Number(timestamp), event: bytes.length === 0 ? null : JSON.parse(bytes.toString('utf8')) };
}

module.exports = { verifyCallback, CallbackVerificationError };
