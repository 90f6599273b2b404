'use strict';
// Client for the Wearbloom dispatcher's socket protocol: docs/protocol.md in the fleet repository.
// A pool of connections (one by default), any number of requests in flight on each (pipelined,
// answered by id in any order). A broken connection is replaced by reconnecting (backoff with full
// jitter, the greeting checked and `auth` sent again); requests that are safe to repeat are sent
// again, the others reject with ConnectionLostError ("Reconnection" in docs/protocol.md).

const net = require('node:net');
const tls = require('node:tls');
const { EventEmitter } = require('node:events');

const PROTOCOL = 'wearbloom-dispatcher';
const VERSION = 1;

/** Ops answered the same however often they are sent (reads, waits, presigns, which change nothing, and render.request, which carries its renderId). */
const SAFE_OPS = new Set([
  'ping', 'status', 'wait', 'stats', 'job.get', 'jobs.list', 'audit.list',
  'render.status', 'render.wait', 'renders.list', 'render.request', 'limits.list', 'limit.set', 'credits.get',
  'upload.presign', 'image.url',
]);
/** Ops that are safe to repeat only with `options.idempotencyKey`. */
const KEYED_OPS = new Set(['enqueue', 'image.normalize', 'garment.process', 'account.purge']);
/** The server's default `timeoutMs` of `wait` and `render.wait`. */
// A W3C traceparent (version 00), as the dispatcher checks it: a malformed one is refused here, not sent.
const TRACEPARENT = /^00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}$/;
const DEFAULT_WAIT_MS = 30_000;
/** How often one request is sent again before it rejects with ConnectionLostError (a request that
 * brings the dispatcher down must not do so forever). */
const MAX_RESENDS = 5;
/** Marks an error that reconnecting again cannot fix (a refused token, an incompatible server). */
const FATAL = Symbol('fatal');

/** An error the dispatcher answered with: `code` is one of the protocol's codes. */
class DispatcherError extends Error {
  constructor(code, message, retryAfterSeconds) {
    super(`${code}: ${message}`);
    this.name = 'DispatcherError';
    this.code = code;
    this.reason = message;
    // RENDER_BUSY: when to ask again.
    if (retryAfterSeconds !== undefined) this.retryAfterSeconds = retryAfterSeconds;
  }
}

/** The client was closed (or, with `reconnect: false`, its connection ended) before an answer arrived. */
class ConnectionClosedError extends Error {
  constructor(cause) {
    super(cause ? `the dispatcher connection is closed (${cause.message})` : 'the dispatcher connection is closed', cause ? { cause } : undefined);
    this.name = 'ConnectionClosedError';
  }
}

/** The connection broke while a request that is not safe to repeat was in flight: it may or may not have been applied. */
class ConnectionLostError extends Error {
  constructor(op, cause) {
    super(`the dispatcher connection was lost while ${op} was in flight: it may or may not have been applied`, cause ? { cause } : undefined);
    this.name = 'ConnectionLostError';
    this.code = 'CONNECTION_LOST';
    this.op = op;
  }
}

/** No connection could be made within `reconnectTimeoutMs`; `cause` is the last connect error. The request was not sent. */
class NotConnectedError extends Error {
  constructor(op, timeoutMs, cause) {
    const why = timeoutMs === null ? 'no connection is open' : `could not reconnect within ${timeoutMs} ms`;
    super(`not connected to the dispatcher: ${why} (${op} was not sent)`, cause ? { cause } : undefined);
    this.name = 'NotConnectedError';
    this.code = 'NOT_CONNECTED';
    this.op = op;
  }
}

function isSafe(request) {
  if (SAFE_OPS.has(request.op)) return true;
  // A graph's idempotency key covers the whole graph: a second send answers the first one's jobs.
  if (request.op === 'jobs.enqueueGraph') return request.args?.idempotencyKey !== undefined && request.args?.idempotencyKey !== null;
  const key = request.args?.options?.idempotencyKey;
  return KEYED_OPS.has(request.op) && key !== undefined && key !== null;
}

/** One socket: framing, the greeting, the requests in flight by id. */
class Connection {
  /** Connects, reads and checks the greeting, and authenticates with `token` when the server requires it. */
  static async open({ host, port, path, token, tls: tlsOptions, maxFrameBytes, connectTimeoutMs }) {
    let socket;
    if (path) {
      socket = net.createConnection({ path });
    } else if (tlsOptions) {
      const { ca, cert, key, servername } = tlsOptions;
      const address = host ?? '127.0.0.1';
      socket = tls.connect({
        host: address, port, ca, cert, key, minVersion: 'TLSv1.2',
        // SNI takes host names only; an IP address is still verified against the certificate's IP SANs.
        servername: servername ?? (net.isIP(address) ? undefined : address),
      });
    } else {
      socket = net.createConnection({ host: host ?? '127.0.0.1', port });
    }
    const connection = new Connection(socket, maxFrameBytes);
    const timer = setTimeout(() => socket.destroy(new Error(`connect timed out after ${connectTimeoutMs} ms`)), connectTimeoutMs);
    try {
      connection.greeting = await connection.#greeting;
      if (connection.greeting.protocol !== PROTOCOL || connection.greeting.version !== VERSION) {
        const error = new Error(`incompatible dispatcher: ${connection.greeting.protocol} version ${connection.greeting.version}`);
        error[FATAL] = true;
        throw error;
      }
      if (connection.greeting.authRequired && token !== undefined) {
        await new Promise((resolve, reject) => connection.send({ op: 'auth', args: { token }, resolve, reject }));
      }
    } catch (error) {
      if (error instanceof DispatcherError && (error.code === 'UNAUTHENTICATED' || error.code === 'FORBIDDEN')) error[FATAL] = true;
      connection.close();
      throw error;
    } finally {
      clearTimeout(timer);
    }
    return connection;
  }

  /** Called once when the connection ends, with the error and the requests still in flight. */
  onLost = null;
  greeting = null;
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
    this.#greeting.catch(() => {});
    socket.setNoDelay(true);
    socket.on('data', (data) => this.#onData(data));
    socket.on('error', (error) => this.#fail(new ConnectionClosedError(error)));
    socket.on('close', () => this.#fail(new ConnectionClosedError()));
  }

  get isOpen() { return this.#closedWith === null; }

  /** Writes one request: `{op, args, traceparent?, resolve, reject}`; its answer settles it. */
  send(request) {
    const id = this.#nextId++;
    this.#pending.set(id, request);
    const frame = { id, op: request.op, args: request.args };
    if (request.traceparent) frame.traceparent = request.traceparent;
    this.#socket.write(JSON.stringify(frame) + '\n');
  }

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
      if (this.#closedWith) return;
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
    const error = frame.error ? new DispatcherError(frame.error.code, frame.error.message, frame.error.retryAfterSeconds) : null;
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
    const pending = [...this.#pending.values()];
    this.#pending.clear();
    this.#socket.destroy();
    if (this.onLost) {
      this.onLost(error, pending);
    } else {
      for (const { reject } of pending) reject(error);
    }
  }
}

class DispatcherClient extends EventEmitter {
  /**
   * Opens `poolSize` connections (TCP with `host`/`port`, TLS with `tls`, or a Unix socket with
   * `path`), reads each greeting and, when the server requires it, authenticates with `token`.
   * Rejects when any of them fails (nothing listening, a wrong token, an incompatible server).
   */
  static async connect({
    host, port, path, token, tls: tlsOptions, maxFrameBytes = 64 * 1024 * 1024, connectTimeoutMs = 5000,
    poolSize = 1, reconnect = true, reconnectTimeoutMs = 30_000, backoff = {}, ...unknown
  } = {}) {
    // The client's own options: a misspelt one (`tsl`, `poolsize`) would silently change nothing.
    const misspelt = Object.keys(unknown)[0] ?? Object.keys(backoff).find((name) => name !== 'initialMs' && name !== 'maxMs');
    if (misspelt !== undefined) throw new TypeError(`DispatcherClient.connect: unknown option ${misspelt in unknown ? misspelt : `backoff.${misspelt}`}`);
    if (!Number.isInteger(poolSize) || poolSize < 1) throw new RangeError(`poolSize must be a positive integer, not ${poolSize}`);
    const client = new DispatcherClient({
      host, port, path, token, tls: tlsOptions, maxFrameBytes, connectTimeoutMs, poolSize, reconnect, reconnectTimeoutMs,
      backoff: { initialMs: backoff.initialMs ?? 50, maxMs: backoff.maxMs ?? 2000 },
    });
    const opened = await Promise.allSettled(client.#slots.map((slot) => client.#open(slot)));
    const failed = opened.find((outcome) => outcome.status === 'rejected');
    if (failed) {
      client.close();
      throw failed.reason;
    }
    return client;
  }

  #options;
  #slots;
  #next = 0;
  /** Requests waiting for a connection (never written to a socket, or to be sent again). */
  #waiting = new Set();
  #closedWith = null;
  #lastError = null;
  #greeting = null;

  constructor(options) {
    super();
    this.#options = options;
    this.#slots = Array.from({ length: options.poolSize }, () => ({ connection: null, reconnecting: false, sleep: null }));
  }

  /** The greeting of the latest connection made. */
  get greeting() { return this.#greeting; }

  /**
   * Sends one request; resolves with its result or rejects with a DispatcherError (or a connection error).
   * With `traceparent` (a W3C traceparent), the dispatcher's spans for it join the caller's trace.
   */
  call(op, args = {}, { traceparent } = {}) {
    if (op === 'auth') return this.auth(args.token);
    if (this.#closedWith) return Promise.reject(this.#closedWith);
    if (traceparent !== undefined && !TRACEPARENT.test(traceparent)) {
      return Promise.reject(new TypeError(`traceparent '${traceparent}' is not a W3C traceparent (00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>)`));
    }
    return new Promise((resolve, reject) =>
      this.#dispatch({ op, args, traceparent, resolve, reject, startedAt: Date.now(), resends: 0, timer: null }));
  }

  ping() { return this.call('ping'); }
  /**
   * Authenticates every open connection; the token is then used for reconnections. A refused
   * token closes the client (the server closes the connection; another try cannot help).
   */
  async auth(token) {
    if (this.#closedWith) throw this.#closedWith;
    const connections = this.#slots.map((slot) => slot.connection).filter((connection) => connection?.isOpen);
    this.#options.token = token; // for the connections made from now on
    if (connections.length === 0) throw new NotConnectedError('auth', null, this.#lastError ?? undefined);
    try {
      const results = await Promise.all(connections.map((connection) => new Promise((resolve, reject) => {
        connection.send({ op: 'auth', args: { token }, resolve, reject });
      })));
      return results[0];
    } catch (error) {
      if (error instanceof DispatcherError) this.#shutDown(new ConnectionClosedError(error));
      throw error;
    }
  }
  // Every method sends the fields it is given as they are (its positional arguments beside them):
  // the dispatcher refuses a field it does not know with BAD_ARGUMENT naming it ("unknown field
  // args.body_upload_id"), so a misspelt option is never silently dropped, and a field a newer
  // dispatcher knows works without a newer client. Only a non-object where an object belongs is
  // refused here (a TypeError): spreading it would drop it.
  enqueue(kind, payload = {}, options = undefined, { traceparent } = {}) {
    return this.call('enqueue', { kind, payload, options }, { traceparent });
  }
  normalizeImage(image, options = undefined) { return this.#send('image.normalize', { options }, image); }
  processGarment(garment, options = undefined) { return this.#send('garment.process', { options }, garment); }
  purgeAccount(userId, options = undefined) { return this.call('account.purge', { userId, options }); }
  enqueueGraph(jobs, options = undefined) { return this.#send('jobs.enqueueGraph', { jobs }, options); }
  status(jobId) { return this.call('status', { jobId }); }
  wait(jobId, options = undefined) { return this.#send('wait', { jobId }, options); }
  cancel(jobId) { return this.call('cancel', { jobId }); }
  stats(options = undefined) { return this.#send('stats', {}, options); }
  requestRender(request, { traceparent } = {}) { return this.#send('render.request', {}, request, { traceparent }); }
  renderStatus(renderId) { return this.call('render.status', { renderId }); }
  waitRender(renderId, options = undefined) { return this.#send('render.wait', { renderId }, options); }
  renderFeedback(feedback) { return this.#send('render.feedback', {}, feedback); }
  listRenders(userId, options = undefined) { return this.#send('renders.list', { userId }, options); }
  issueToken() { return this.call('token.issue'); }
  linkAccount(link) { return this.#send('account.link', {}, link); }
  /** A user's balance: granted, consumed, reserved, available, and whether renders are free now. */
  credits(userId) { return this.call('credits.get', { userId }); }
  /** A PUT URL straight to the image store (S3): send the bytes with exactly `headers`, then name `uploadId` in a render request. */
  presignUpload(upload) { return this.#send('upload.presign', {}, upload); }
  /** A GET URL (at most 15 minutes) for one of a user's images: redirect the app to it rather than passing the bytes on. */
  imageUrl(image) { return this.#send('image.url', {}, image); }
  /** Operators (operate role): failed renders again, one by renderId or many by filter. */
  retryRenders(retry) { return this.#send('render.retry', {}, retry); }
  // Job control (a token with the read or operate role; docs/protocol.md).
  getJob(jobId) { return this.call('job.get', { jobId }); }
  listJobs(filter = undefined, options = undefined) { return this.#send('jobs.list', { filter }, options); }
  retryJob(jobId, options = undefined) { return this.#send('job.retry', { jobId }, options); }
  retryJobs(filter, options = undefined) { return this.#send('jobs.retry', { filter }, options); }
  discardJob(jobId) { return this.call('job.discard', { jobId }); }
  discardJobs(filter, options = undefined) { return this.#send('jobs.discard', { filter }, options); }
  pause(target) { return this.#send('queue.pause', {}, target); }
  resume(target) { return this.#send('queue.resume', {}, target); }
  listAudit(options = undefined) { return this.#send('audit.list', {}, options); }
  // Fleet-wide limits (docs/queue.md, "Limits"): read and operate tokens see them, operate sets them.
  limits() { return this.call('limits.list'); }
  setLimit(limit) { return this.#send('limit.set', {}, limit); }
  removeLimit(key) { return this.call('limit.remove', { key }); }

  /** `fields` (an object or undefined) sent whole beside `args`; anything else rejects with a TypeError. */
  #send(op, args, fields, trace = {}) {
    if (fields !== undefined && (fields === null || typeof fields !== 'object' || Array.isArray(fields))) {
      return Promise.reject(new TypeError(`${op}: expected an object of fields, not ${fields === null ? 'null' : Array.isArray(fields) ? 'an array' : typeof fields}`));
    }
    const sent = { ...fields };
    for (const [name, value] of Object.entries(args)) {
      if (value === undefined) continue;
      if (Object.hasOwn(sent, name)) return Promise.reject(new TypeError(`${op}: ${name} is given twice (as an argument and as a field)`));
      sent[name] = value;
    }
    return this.call(op, sent, trace);
  }

  /** Closes every connection and stops reconnecting; requests in flight or waiting reject with ConnectionClosedError. */
  close() {
    this.#shutDown(new ConnectionClosedError());
  }

  #shutDown(error) {
    if (this.#closedWith) return;
    this.#closedWith = error;
    for (const slot of this.#slots) {
      if (slot.sleep) slot.sleep();
      slot.connection?.close();
    }
    for (const request of this.#waiting) {
      clearTimeout(request.timer);
      request.reject(error);
    }
    this.#waiting.clear();
  }

  /** Opens the slot's connection, and watches it. */
  async #open(slot) {
    const connection = await Connection.open(this.#options);
    if (this.#closedWith) {
      connection.close();
      throw this.#closedWith;
    }
    slot.connection = connection;
    this.#greeting = connection.greeting;
    connection.onLost = (error, pending) => this.#lost(slot, connection, error, pending);
    return connection;
  }

  /** An open connection, round-robin; starts replacing the dead ones. */
  #pick() {
    const count = this.#slots.length;
    let picked = null;
    for (let i = 0; i < count; i++) {
      const index = (this.#next + i) % count;
      const connection = this.#slots[index].connection;
      if (connection?.isOpen) {
        this.#next = index + 1;
        picked = connection;
        break;
      }
    }
    if (this.#options.reconnect) for (const slot of this.#slots) if (!slot.connection) this.#reconnect(slot);
    return picked;
  }

  #dispatch(request) {
    if (this.#closedWith) {
      request.reject(this.#closedWith);
      return;
    }
    const connection = this.#pick();
    if (connection) {
      connection.send(request);
    } else if (!this.#options.reconnect) {
      request.reject(new ConnectionClosedError(this.#lastError ?? undefined));
    } else {
      // Waits for a connection, at most reconnectTimeoutMs; #pick has started the reconnections.
      const timeoutMs = this.#options.reconnectTimeoutMs;
      request.timer = setTimeout(() => {
        this.#waiting.delete(request);
        request.reject(new NotConnectedError(request.op, timeoutMs, this.#lastError ?? undefined));
      }, timeoutMs);
      this.#waiting.add(request);
    }
  }

  /** Sends the waiting requests once a connection is back. */
  #flush() {
    const waiting = [...this.#waiting];
    this.#waiting.clear();
    for (const request of waiting) {
      clearTimeout(request.timer);
      request.timer = null;
      this.#dispatch(request);
    }
  }

  #lost(slot, connection, error, pending) {
    if (slot.connection === connection) slot.connection = null;
    this.#lastError = error;
    if (this.#closedWith) {
      for (const request of pending) request.reject(this.#closedWith);
      return;
    }
    if (!this.#options.reconnect) {
      for (const request of pending) request.reject(error);
      this.emit('disconnect', error);
      return;
    }
    // A connection-level error frame (FRAME_TOO_LARGE, …) answers what was in flight: sending it
    // again would only repeat it. An idle close is not about the requests (the server closes only
    // a connection with nothing in flight): they are handled as after a broken connection.
    const answered = error instanceof DispatcherError && error.code !== 'IDLE_TIMEOUT';
    for (const request of pending) {
      if (answered) {
        request.reject(error);
      } else if (isSafe(request) && request.resends < MAX_RESENDS) {
        request.resends++;
        if (request.op === 'wait' || request.op === 'render.wait') {
          // The wait goes on for what is left of its timeout.
          request.originalTimeoutMs ??= request.args.timeoutMs ?? DEFAULT_WAIT_MS;
          if (Number.isInteger(request.originalTimeoutMs)) {
            request.args = { ...request.args, timeoutMs: Math.max(0, request.originalTimeoutMs - (Date.now() - request.startedAt)) };
          }
        }
        this.#dispatch(request);
      } else {
        request.reject(new ConnectionLostError(request.op, error));
      }
    }
    // After an idle close the next request reconnects; otherwise reconnect at once.
    if (!(error instanceof DispatcherError && error.code === 'IDLE_TIMEOUT')) this.#reconnect(slot);
    this.emit('disconnect', error);
  }

  /** Reconnects the slot: exponential backoff with full jitter; gives up when a token is refused or the server is
   * incompatible (the waiting requests reject with that error), or after reconnectTimeoutMs with nothing waiting. */
  async #reconnect(slot) {
    if (slot.reconnecting || slot.connection || this.#closedWith) return;
    slot.reconnecting = true;
    const { initialMs, maxMs } = this.#options.backoff;
    const startedAt = Date.now();
    try {
      for (let attempt = 0; !this.#closedWith; attempt++) {
        const delay = Math.random() * Math.min(maxMs, initialMs * 2 ** attempt);
        await new Promise((resolve) => {
          const timer = setTimeout(resolve, delay);
          slot.sleep = () => { clearTimeout(timer); resolve(); };
        });
        slot.sleep = null;
        if (this.#closedWith) return;
        let connection;
        try {
          connection = await this.#open(slot);
        } catch (error) {
          if (this.#closedWith) return;
          // The socket's own error (ECONNREFUSED, a certificate refused, …) rather than its wrapper.
          this.#lastError = error instanceof ConnectionClosedError && error.cause ? error.cause : error;
          if (error[FATAL]) {
            for (const request of this.#waiting) {
              clearTimeout(request.timer);
              request.reject(error);
            }
            this.#waiting.clear();
            return;
          }
          if (this.#waiting.size === 0 && Date.now() - startedAt > this.#options.reconnectTimeoutMs) return;
          continue;
        }
        this.#flush();
        // The dispatcher is back: the other connections need not wait out their backoff.
        for (const other of this.#slots) if (other !== slot) other.sleep?.();
        this.emit('reconnect', connection.greeting);
        return;
      }
    } finally {
      slot.reconnecting = false;
      slot.sleep = null;
    }
  }
}

const { verifyCallback, CallbackVerificationError } = require('./callbacks');

module.exports = {
  verifyCallback, CallbackVerificationError,
  DispatcherClient, DispatcherError, ConnectionClosedError, ConnectionLostError, NotConnectedError, PROTOCOL, VERSION, SAFE_OPS, KEYED_OPS,
};
