'use strict';
// Client for the Wearbloom dispatcher's socket protocol: docs/protocol.md in the fleet repository.
// One connection, any number of requests in flight (pipelined, answered by id in any order).

const net = require('node:net');

const PROTOCOL = 'wearbloom-dispatcher';
const VERSION = 1;

/** An error the dispatcher answered with: `code` is one of the protocol's codes. */
class DispatcherError extends Error {
  constructor(code, message) {
    super(`${code}: ${message}`);
    this.name = 'DispatcherError';
    this.code = code;
    this.reason = message;
  }
}

/** The connection ended (closed by either side, or broke) before an answer arrived. */
class ConnectionClosedError extends Error {
  constructor(cause) {
    super('the dispatcher connection is closed', cause ? { cause } : undefined);
    this.name = 'ConnectionClosedError';
  }
}

class DispatcherClient {
  /**
   * Connects (TCP with `host`/`port`, or a Unix socket with `path`), reads the greeting and, when
   * the server requires it, authenticates with `token`.
   */
  static async connect({ host, port, path, token, maxFrameBytes = 64 * 1024 * 1024, connectTimeoutMs = 5000 } = {}) {
    const socket = path ? net.createConnection({ path }) : net.createConnection({ host: host ?? '127.0.0.1', port });
    const client = new DispatcherClient(socket, maxFrameBytes);
    const timer = setTimeout(() => socket.destroy(new Error(`connect timed out after ${connectTimeoutMs} ms`)), connectTimeoutMs);
    try {
      client.greeting = await client.#greeting;
    } finally {
      clearTimeout(timer);
    }
    if (client.greeting.protocol !== PROTOCOL || client.greeting.version !== VERSION) {
      client.close();
      throw new Error(`incompatible dispatcher: ${client.greeting.protocol} version ${client.greeting.version}`);
    }
    if (client.greeting.authRequired && token !== undefined) await client.auth(token);
    return client;
  }

  #socket;
  #maxFrameBytes;
  #chunks = [];
  #buffered = 0;
  #pending = new Map();
  #nextId = 1;
  #closedWith = null;
  #greeting;
  #greeted;

  constructor(socket, maxFrameBytes) {
    this.#socket = socket;
    this.#maxFrameBytes = maxFrameBytes;
    this.#greeting = new Promise((resolve, reject) => { this.#greeted = { resolve, reject }; });
    socket.setNoDelay(true);
    socket.on('data', (data) => this.#onData(data));
    socket.on('error', (error) => this.#fail(new ConnectionClosedError(error)));
    socket.on('close', () => this.#fail(new ConnectionClosedError()));
  }

  /** Sends one request; resolves with its result or rejects with a DispatcherError. */
  call(op, args = {}) {
    if (this.#closedWith) return Promise.reject(this.#closedWith);
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      this.#socket.write(JSON.stringify({ id, op, args }) + '\n');
    });
  }

  ping() { return this.call('ping'); }
  auth(token) { return this.call('auth', { token }); }
  enqueue(kind, payload = {}, options = undefined) { return this.call('enqueue', { kind, payload, options }); }
  normalizeImage({ userId, uploadId, target, imageId }, options = undefined) {
    return this.call('image.normalize', { userId, uploadId, target, imageId, options });
  }
  processGarment({ userId, uploadId, garmentId }, options = undefined) {
    return this.call('garment.process', { userId, uploadId, garmentId, options });
  }
  purgeAccount(userId, options = undefined) { return this.call('account.purge', { userId, options }); }
  status(jobId) { return this.call('status', { jobId }); }
  wait(jobId, { timeoutMs } = {}) { return this.call('wait', { jobId, timeoutMs }); }
  cancel(jobId) { return this.call('cancel', { jobId }); }
  stats({ windowSeconds } = {}) { return this.call('stats', { windowSeconds }); }
  requestRender({ renderId, userId, ephemeralToken, ownerId, garmentId, bodyPhotoId, category }) {
    return this.call('render.request', { renderId, userId, ephemeralToken, ownerId, garmentId, bodyPhotoId, category });
  }
  renderStatus(renderId) { return this.call('render.status', { renderId }); }
  waitRender(renderId, { timeoutMs } = {}) { return this.call('render.wait', { renderId, timeoutMs }); }
  renderFeedback({ renderId, userId, vote, category }) { return this.call('render.feedback', { renderId, userId, vote, category }); }
  listRenders(userId, { limit } = {}) { return this.call('renders.list', { userId, limit }); }
  issueToken() { return this.call('token.issue'); }
  linkAccount({ ephemeralToken, userId }) { return this.call('account.link', { ephemeralToken, userId }); }
  // Job control (a token with the read or operate role; docs/protocol.md).
  getJob(jobId) { return this.call('job.get', { jobId }); }
  listJobs(filter = undefined, { limit, cursor } = {}) { return this.call('jobs.list', { filter, limit, cursor }); }
  retryJob(jobId, { runAt } = {}) { return this.call('job.retry', { jobId, runAt }); }
  retryJobs(filter, { limit, dryRun } = {}) { return this.call('jobs.retry', { filter, limit, dryRun }); }
  discardJob(jobId) { return this.call('job.discard', { jobId }); }
  discardJobs(filter, { limit, dryRun } = {}) { return this.call('jobs.discard', { filter, limit, dryRun }); }
  pause({ kind, queue }) { return this.call('queue.pause', { kind, queue }); }
  resume({ kind, queue }) { return this.call('queue.resume', { kind, queue }); }
  listAudit({ limit, cursor } = {}) { return this.call('audit.list', { limit, cursor }); }

  /** Closes the connection; requests still in flight reject with ConnectionClosedError. */
  close() {
    this.#socket.end();
    this.#socket.destroy();
  }

  #onData(data) {
    let start = 0;
    let newline;
    while ((newline = data.indexOf(0x0a, start)) !== -1) {
      this.#chunks.push(data.subarray(start, newline));
      const line = Buffer.concat(this.#chunks).toString('utf8');
      this.#chunks = [];
      this.#buffered = 0;
      start = newline + 1;
      if (line.trim() !== '') this.#onFrame(line);
    }
    if (start < data.length) {
      this.#chunks.push(data.subarray(start));
      this.#buffered += data.length - start;
      if (this.#buffered > this.#maxFrameBytes) this.#socket.destroy(new Error(`frame longer than ${this.#maxFrameBytes} bytes`));
    }
  }

  #onFrame(line) {
    let frame;
    try {
      frame = JSON.parse(line);
    } catch {
      this.#socket.destroy(new Error(`unexpected frame from the dispatcher: ${line.slice(0, 200)}`));
      return;
    }
    if (frame.type === 'greeting') {
      this.#greeted.resolve(frame);
      return;
    }
    const error = frame.error ? new DispatcherError(frame.error.code, frame.error.message) : null;
    if (frame.id === null || frame.id === undefined) {
      // About the connection itself (refused, frame too large, timeout): the server closes it next.
      this.#fail(error ?? new Error(`unexpected frame from the dispatcher: ${line.slice(0, 200)}`));
      return;
    }
    const pending = this.#pending.get(frame.id);
    if (!pending) return;
    this.#pending.delete(frame.id);
    if (error) pending.reject(error); else pending.resolve(frame.result);
  }

  #fail(error) {
    if (this.#closedWith) return;
    this.#closedWith = error;
    this.#greeted.reject(error);
    for (const { reject } of this.#pending.values()) reject(error);
    this.#pending.clear();
    this.#socket.destroy();
  }
}

module.exports = { DispatcherClient, DispatcherError, ConnectionClosedError, PROTOCOL, VERSION };
