// Types of the Wearbloom dispatcher client. The protocol: docs/protocol.md in the fleet repository.
// Dates are ISO 8601 strings; optional fields arrive as explicit nulls. Self-contained: no
// @types/node needed (bytes are Uint8Array, which Node's Buffer is).
// Every result interface lists the fields the dispatcher sends, no more, no fewer:
// test/types.test.js compares them with real answers.

export declare const PROTOCOL: 'wearbloom-dispatcher';
export declare const VERSION: 1;

export type ErrorCode =
  | 'MALFORMED_FRAME' | 'FRAME_TOO_LARGE' | 'FRAME_TIMEOUT' | 'IDLE_TIMEOUT' | 'UNKNOWN_OP' | 'UNAUTHENTICATED'
  | 'BAD_ARGUMENT' | 'NOT_FOUND' | 'UNKNOWN_KIND' | 'TOO_MANY_CONNECTIONS' | 'UNAVAILABLE' | 'INTERNAL'
  | 'INSUFFICIENT_CREDITS' | 'RENDER_FAILED' | 'RENDER_TIMEOUT' | 'INVALID_CATEGORY' | 'SUBSCRIPTION_EXPIRED' | 'IMAGE_TOO_LARGE'
  | 'RENDER_BUSY' | 'FORBIDDEN' | 'JOB_NOT_RETRYABLE' | 'JOB_NOT_FINISHED' | 'INVALID_TOKEN' | 'TOKEN_ALREADY_USED'
  | 'RENDER_ID_CONFLICT' | 'RENDER_NOT_COMPLETE' | 'STORAGE_NOT_PRESIGNABLE'
  | (string & {});

/** An error the dispatcher answered with. */
export declare class DispatcherError extends Error {
  readonly code: ErrorCode;
  /** The server's message, without the code. */
  readonly reason: string;
  /**
   * `RENDER_BUSY` only: the render could not finish within its deadline at the provider's
   * capacity now; nothing was reserved or queued. Ask again after this many seconds.
   */
  readonly retryAfterSeconds?: number;
}

/** A fleet-wide limit (docs/queue.md, "Limits") and the use made of it now. */
export interface LimitView {
  /** `provider:fal-fashn`, or a prefix ending in `*` (`user:*`: each user on its own). */
  key: string;
  maxRunning: number | null;
  rate: number | null;
  rateWindowSeconds: number;
  /** The rate in force: lower than `rate` while the provider's 429s keep it throttled. */
  effectiveRate: number | null;
  keys: { key: string; running: number; startedInWindow: number; waiting: number }[];
}

export interface LimitsResult {
  /** `setLimit` / `removeLimit`: whether a rule was created, changed or removed. */
  changed: boolean | null;
  limits: LimitView[];
}

/**
 * The client was closed (`close()`, or a token refused by `auth()`) before an answer arrived; with
 * `reconnect: false`, also a connection that ended (closed by either side, or broke). `cause` is
 * the socket's error, when there was one.
 */
export declare class ConnectionClosedError extends Error {}

/**
 * The connection broke while a request that is not safe to repeat was in flight (an `enqueue`
 * without an idempotency key, a `cancel`, a job-control change, …): it may or may not have been
 * applied. Look before trying again (`status`, `jobs.list`). `cause` is the connection's error.
 */
export declare class ConnectionLostError extends Error {
  readonly code: 'CONNECTION_LOST';
  /** The request's op, e.g. `enqueue`. */
  readonly op: string;
}

/**
 * No connection to the dispatcher could be made within `reconnectTimeoutMs` (it is down, or
 * unreachable): the request was never sent. `cause` is the last connect error (e.g. ECONNREFUSED).
 */
export declare class NotConnectedError extends Error {
  readonly code: 'NOT_CONNECTED';
  readonly op: string;
}

/** Ops sent again after a reconnection: reads, waits, and `render.request` (it carries its renderId). */
export declare const SAFE_OPS: ReadonlySet<string>;
/** Ops sent again after a reconnection only when `args.options.idempotencyKey` is set. */
export declare const KEYED_OPS: ReadonlySet<string>;

/** `waiting`: for the jobs it runs after (`JobOptions.after`); `available`: perhaps for its `runAt`. */
export type JobState = 'waiting' | 'available' | 'running' | 'completed' | 'dead' | 'cancelled';
/** A normalise profile: the built-in ones, or one an operator stored in `fleet_settings` (`image.profiles`). */
export type NormalizeProfileName = 'upload' | 'trial-room' | 'thumb' | (string & {});

/** An `image.normalize` job's result (`JobStatus.result` once completed). */
export interface NormalizeImageResult {
  path: string;
  width: number;
  height: number;
  bytes: number;
  /** The profile applied (`upload` when the request named none). */
  profile: string;
  /** A payload with `thenCutout` only (the previous release's `garment.process`): the background-removal job it enqueued. */
  cutoutJobId?: number;
}

export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

export interface Greeting {
  type: 'greeting';
  protocol: 'wearbloom-dispatcher';
  version: number;
  authRequired: boolean;
  maxFrameBytes: number;
  ops: string[];
}

/** The queue's options; each one left out takes the default. */
/** Joins a request to the caller's trace: `traceparent` is a W3C traceparent (`00-<trace id>-<parent id>-<flags>`). */
export interface TraceOptions {
  traceparent?: string;
}

export interface JobOptions {
  queue?: string;
  /** 0 runs first, 9 last; default 2. */
  priority?: number;
  /** Default 5. */
  maxAttempts?: number;
  delaySeconds?: number;
  /** Enqueueing the same key again returns the first job. */
  idempotencyKey?: string;
  /**
   * Keys the fleet-wide limits count the job under (`limits()`), e.g. `['tenant:acme']`; at most 8
   * of `A-Z a-z 0-9 . _ : -`. Honoured for kinds whose workers claim under limits.
   */
  limitKeys?: string[];
  /**
   * Where the fleet POSTs the job's signed end (a `JobFinishedEvent`; check it with
   * `verifyCallback`). Its host must be in the dispatcher's FLEET_OUTBOUND_HOSTS, else BAD_ARGUMENT.
   */
  callbackUrl?: string;
  /**
   * Ids of jobs it runs after (at most 100, each existing and not dead or cancelled, else
   * BAD_ARGUMENT): it is `waiting` until every one is completed, and ends `cancelled` with
   * `DEPENDENCY_FAILED` if one ends otherwise.
   */
  after?: number[];
}

/** One job of `enqueueGraph`: `after` names jobs of the graph (strings) and existing jobs (ids). */
export interface GraphJob {
  /** Unique in the graph, 1 to 64 bytes. */
  name: string;
  kind: string;
  payload?: { [key: string]: JsonValue };
  /** No `idempotencyKey` (the graph's covers it) and no `after` (the job's own `after` says it). */
  options?: Omit<JobOptions, 'idempotencyKey' | 'after'>;
  after?: (string | number)[];
}

export interface EnqueuedGraph {
  /** In the request's order. */
  jobs: { name: string; jobId: number; kind: string }[];
  /** false: the idempotency key named a graph enqueued before, and these are its jobs. */
  isNew: boolean;
}

export interface EnqueuedJob {
  jobId: number;
  kind: string;
  /** false: an earlier job with the same idempotency key, returned as is. */
  isNew: boolean;
}

/** `garment.process`'s answer: the normalise job (`jobId`) and the cut-out job enqueued after it with it. */
export interface ProcessedGarment extends EnqueuedJob {
  /** The `garment.cutout` job: its end is the garment's (`cancelled`, `DEPENDENCY_FAILED`, when the normalisation fails). */
  cutoutJobId: number;
}

export interface JobAttemptError {
  attempt: number;
  at: string;
  error: string;
  code: string | null;
  worker: string | null;
}

export interface JobStatus {
  id: number;
  kind: string;
  queue: string;
  state: JobState;
  priority: number;
  attempt: number;
  maxAttempts: number;
  payload: { [key: string]: JsonValue };
  result: JsonValue;
  errors: JobAttemptError[];
  idempotencyKey: string | null;
  workerId: string | null;
  cancelRequested: boolean;
  createdAt: string;
  runAt: string;
  startedAt: string | null;
  finishedAt: string | null;
  /** The jobs it runs after, ascending. */
  after: number[];
  /** Those of them not completed yet (while `waiting`: what it waits on). */
  waitingOn: number[];
}

export interface WaitResult {
  job: JobStatus;
  /** true: the job had not finished when the wait ended (timeout, or the server shutting down). */
  timedOut: boolean;
}

export interface CancelResult {
  outcome: 'cancelled' | 'requested' | 'alreadyFinished';
  state: JobState;
  workerId: string | null;
}

export interface KindStats {
  kind: string;
  due: number;
  scheduled: number;
  running: number;
  retrying: number;
  /** Waiting for the jobs they run after. */
  waiting: number;
  completed: number;
  dead: number;
  cancelled: number;
  /** Of the cancelled: ended because a job they ran after failed (`DEPENDENCY_FAILED`). */
  dependencyFailed: number;
  oldestDueSeconds: number | null;
  /** No worker claims it (queue.pause). */
  paused: boolean;
}

export interface WorkerStats {
  id: string;
  host: string;
  pid: number;
  executable: string;
  kinds: string[];
  startedAt: string;
  lastHeartbeatAt: string;
  running: number;
  /** Those of its kinds it does not claim now (paused). */
  pausedKinds: string[];
}

export interface QueuePause {
  scope: 'kind' | 'queue';
  name: string;
  /** The access token's name that paused it. */
  pausedBy: string;
  pausedAt: string;
}

export interface QueueStats {
  windowSeconds: number;
  kinds: KindStats[];
  workers: WorkerStats[];
  pauses: QueuePause[];
  /** The fleet-wide limits and their use, as `limits()`. */
  limits: LimitView[];
  serverTime: string;
}

export type AccessRole = 'submit' | 'read' | 'operate';

/** Which jobs a job-control op means; fields combine with AND; dates are ISO 8601. */
export interface JobFilter {
  states?: JobState[];
  kinds?: string[];
  queues?: string[];
  /** The code of the job's latest error. */
  errorCode?: string;
  createdAfter?: string;
  createdBefore?: string;
  finishedAfter?: string;
  finishedBefore?: string;
}

export interface JobSummary {
  id: number;
  kind: string;
  queue: string;
  state: JobState;
  priority: number;
  attempt: number;
  maxAttempts: number;
  lastError: JobAttemptError | null;
  /** The worker running it, while it runs. */
  workerId: string | null;
  createdAt: string;
  runAt: string;
  startedAt: string | null;
  finishedAt: string | null;
}

export interface AuditEntry {
  id: number;
  at: string;
  /** The access token's name, or unix-socket. */
  actor: string;
  action: string;
  target: JsonValue;
  affected: number;
}

export type GarmentCategory = 'tops' | 'bottoms' | 'dresses' | 'shoes' | 'outerwear';
export type RenderState = 'pending' | 'processing' | 'complete' | 'failed';

export interface Render {
  id: string;
  /** null while an unlinked onboarding token owns the render. */
  userId: string | null;
  garmentId: string;
  bodyPhotoId: string;
  category: GarmentCategory;
  provider: string;
  status: RenderState;
  jobId: number | null;
  /** Below the storage root, e.g. `u1/renders/r1.jpg`, once complete. */
  resultPath: string | null;
  /**
   * A presigned GET of the result (5 minutes), once complete, in renderStatus and waitRender when the
   * store is S3 and the token's role is submit or operate; null otherwise (files, a read token).
   */
  resultUrl: string | null;
  /** `RENDER_FAILED` or `RENDER_TIMEOUT` once failed. */
  errorCode: string | null;
  /** Why it failed (`PROVIDER_DOWN`, `TIMEOUT`, `PROVIDER_REJECTED`, `IMAGE_INVALID`…), once failed. */
  failureCode: string | null;
  /** The failure for people (never a secret, at most 500 characters), once failed. */
  errorMessage: string | null;
  charged: boolean;
  /**
   * The garment image sent to the provider: its cut-out (true) or its normalised photo (false:
   * background removal ended without a cut-out, or none was stored); null until the render has
   * read its inputs.
   */
  garmentCutout: boolean | null;
  feedback: 'up' | 'down' | null;
  deadlineAt: string;
  createdAt: string;
  updatedAt: string;
}

/** Exactly one of userId (a user's render, paid with a credit unless they subscribe) and ephemeralToken (the onboarding render). */
export type RenderRequest = RenderRequestFields & ({ userId: string; ephemeralToken?: never } | { ephemeralToken: string; userId?: never });

export interface RenderRequestFields {
  /** The caller's id for the render; the same id again returns the first render. */
  renderId: string;
  /** Default userId; with a token always the token's id. */
  ownerId?: string;
  garmentId: string;
  bodyPhotoId: string;
  /** The upload bodyPhotoId is still to be normalised from: the render runs after that job. */
  bodyUploadId?: string;
  /** The upload garmentId is still to be normalised and cut out from: the render runs after both jobs. */
  garmentUploadId?: string;
  category: GarmentCategory;
  /** Where the fleet POSTs the render's signed end (a `RenderFinishedEvent`); host in FLEET_OUTBOUND_HOSTS. */
  callbackUrl?: string;
  /** Ids of jobs the render also runs after (at most 100), besides the image jobs still making its photos, which the dispatcher finds. */
  after?: number[];
}

export interface RenderWaitResult {
  render: Render;
  /** true: the render had not ended when the wait ended. */
  timedOut: boolean;
}

/** The content types an upload may have: those the image worker normalises. */
export type UploadContentType = 'image/jpeg' | 'image/png' | 'image/webp' | 'image/heic';

export type UploadPresignRequest = UploadPresignFields & ({ userId: string; ephemeralToken?: never } | { ephemeralToken: string; userId?: never });

export interface UploadPresignFields {
  /** Your id for the upload (1 to 64 of A-Z a-z 0-9 _ -); omitted, the dispatcher picks one. */
  uploadId?: string;
  contentType: UploadContentType;
  /** The upload's exact size in bytes; above the image worker's limit (60 MiB) IMAGE_TOO_LARGE. */
  contentLength: number;
  /** 1 to 900, default 300. */
  expiresInSeconds?: number;
}

/** A PUT URL for one upload: send its bytes with exactly `headers`, before `expiresAt`. */
export interface PresignedUpload {
  uploadId: string;
  /** The storage tree it lands in: the userId, or the onboarding token's tokenId. */
  ownerId: string;
  method: 'PUT';
  url: string;
  headers: Record<string, string>;
  expiresAt: string;
}

export type ImageKind = 'body' | 'garment' | 'cutout' | 'preview' | 'render';

/** A GET URL for one image, until `expiresAt` (a bearer credential: never log it). */
export interface PresignedUrl {
  method: 'GET';
  url: string;
  /** Empty for a GET. */
  headers: Record<string, string>;
  expiresAt: string;
}

export interface OnboardingToken {
  /** The secret for the app; only its hash is stored. */
  token: string;
  tokenId: string;
  expiresAt: string;
}

export interface PingResult {
  pong: true;
  serverTime: string;
}

export interface AuthResult {
  authenticated: true;
  /** The access token's name (`default` for FLEET_DISPATCHER_TOKEN). */
  name: string;
  role: AccessRole;
}

export interface FeedbackResult {
  renderId: string;
  vote: 'up' | 'down';
  /** true only for the call that gave the credit back. */
  refunded: boolean;
}

export interface RenderList {
  renders: Render[];
}

export interface LinkResult {
  userId: string;
  /** The onboarding render now the user's, if the token had one. */
  renderId: string | null;
  creditsGranted: number;
}

/** A user's credits as the app shows them, and whether renders are free now. */
export interface CreditBalance {
  userId: string;
  granted: number;
  consumed: number;
  /** Held by renders under way: consumed when they complete, released when they fail. */
  reserved: number;
  /** granted − consumed − reserved: what new renders may still reserve. */
  available: number;
  /**
   * Renders are free now (not charged): trial or paid and not expired, cancelled until its end,
   * paid within Apple's billing grace. The rule render charging applies.
   */
  subscribed: boolean;
  /** The latest subscription (the one ending last); null when the user never had one. */
  subscription: CreditSubscription | null;
}

export interface CreditSubscription {
  status: 'trial' | 'subscribed' | 'expired' | 'cancelled';
  expiresAt: string | null;
}

export interface JobsPage {
  jobs: JobSummary[];
  /** Pass back for the next page; null: no more. */
  nextCursor: string | null;
}

export interface BulkResult {
  count: number;
  dryRun: boolean;
}

/** `jobs.retry`: `leftAlone` (absent when none) says which jobs the retry skipped and why (render.run jobs of ended renders). */
export interface RetryJobsResult extends BulkResult {
  leftAlone?: LeftAloneJobs[];
}

export interface LeftAloneJobs {
  reason: string;
  count: number;
  sampleJobIds: number[];
}

export interface RenderRetryResult {
  dryRun: boolean;
  count: number;
  renderIds: string[];
  refused: RenderRetryRefusal[];
}

export interface RenderRetryRefusal {
  renderId: string;
  code: string;
  message: string;
}

export interface DiscardResult {
  jobId: number;
  discarded: true;
}

export interface PauseResult {
  changed: boolean;
  pauses: QueuePause[];
}

export interface AuditPage {
  entries: AuditEntry[];
  nextCursor: string | null;
}

export interface ConnectOptions {
  /** TCP host (default 127.0.0.1), with `port`. */
  host?: string;
  port?: number;
  /** A Unix socket path instead of TCP. */
  path?: string;
  /** Sent with `auth` when the server requires it (TCP), on every connection and reconnection. */
  token?: string;
  /** TLS on TCP (the dispatcher started with `FLEET_DISPATCHER_TLS_CERT`/`_KEY`); reconnections use it too. */
  tls?: TLSOptions;
  /** The longest frame accepted from the server; default 64 MiB. */
  maxFrameBytes?: number;
  /** Each connection's connect, greeting and `auth`; default 5000 ms. */
  connectTimeoutMs?: number;
  /** Connections to open; calls are spread over them round-robin. Default 1. */
  poolSize?: number;
  /**
   * Default true: a connection that breaks (an idle close, a dispatcher restart, a network break)
   * is replaced, with the greeting checked and `auth` sent again. Requests in flight that are safe
   * to repeat (SAFE_OPS; KEYED_OPS with an idempotency key) are sent again once a connection is
   * back (`wait` and `render.wait` for what is left of their timeout); the others reject with
   * ConnectionLostError. false: a broken connection rejects its requests, and later calls when no
   * connection is left, with ConnectionClosedError.
   */
  reconnect?: boolean;
  /** How long a request waits for a connection before it rejects with NotConnectedError; default 30000 ms. */
  reconnectTimeoutMs?: number;
  /** Between connect attempts: a random delay up to initialMs × 2^attempt, at most maxMs (full jitter). */
  backoff?: { initialMs?: number; maxMs?: number };
}

/** PEM strings or bytes (a Buffer), as `tls.connect` takes them. */
export interface TLSOptions {
  /** The CA(s) the server's certificate must chain to; the system's CAs when left out. */
  ca?: string | Uint8Array | Array<string | Uint8Array>;
  /** A client certificate and its key, for a dispatcher that requires them (`FLEET_DISPATCHER_TLS_CLIENT_CA`). */
  cert?: string | Uint8Array;
  key?: string | Uint8Array;
  /**
   * The name to verify the certificate against (and send as SNI); default `host`. An IP address
   * as `host` is verified against the certificate's IP addresses.
   */
  servername?: string;
}

export interface DispatcherClientEvents {
  /** A connection broke (the error says how: a ConnectionClosedError, or a DispatcherError such as IDLE_TIMEOUT). */
  disconnect: [error: Error];
  /** A connection was made again; the greeting is the new one. */
  reconnect: [greeting: Greeting];
}

/**
 * An EventEmitter (node:events) with the client's two events. Every method sends the fields it is
 * given whole: a field the dispatcher does not know rejects with BAD_ARGUMENT naming it (never
 * silently dropped); a non-object where an object belongs rejects with a TypeError.
 */
export declare class DispatcherClient {
  /** Opens `poolSize` connections; rejects when one fails (nothing listening, a refused token, an incompatible server). */
  static connect(options: ConnectOptions): Promise<DispatcherClient>;
  /** The latest connection's greeting. */
  readonly greeting: Greeting;
  on<E extends keyof DispatcherClientEvents>(event: E, listener: (...args: DispatcherClientEvents[E]) => void): this;
  once<E extends keyof DispatcherClientEvents>(event: E, listener: (...args: DispatcherClientEvents[E]) => void): this;
  off<E extends keyof DispatcherClientEvents>(event: E, listener: (...args: DispatcherClientEvents[E]) => void): this;
  removeListener<E extends keyof DispatcherClientEvents>(event: E, listener: (...args: DispatcherClientEvents[E]) => void): this;
  removeAllListeners(event?: keyof DispatcherClientEvents): this;
  listenerCount(event: keyof DispatcherClientEvents): number;
  /**
   * Any op by name; resolves with its result or rejects with a DispatcherError, a
   * ConnectionLostError (connection broken, not safe to repeat), a NotConnectedError (no
   * connection within reconnectTimeoutMs) or a ConnectionClosedError (closed).
   */
  /** `traceparent`: a W3C traceparent; the dispatcher's spans for the request join that trace. */
  call<T = unknown>(op: string, args?: object, trace?: TraceOptions): Promise<T>;
  ping(): Promise<PingResult>;
  /** Authenticates every open connection and keeps the token for reconnections; a refused token closes the client. */
  auth(token: string): Promise<AuthResult>;
  enqueue(kind: string, payload?: { [key: string]: JsonValue }, options?: JobOptions, trace?: TraceOptions): Promise<EnqueuedJob>;
  /**
   * `profile`: a normalise profile's name (built in: `upload`, the default, at most 1200 px wide; `trial-room`,
   * at most 2000 px high; `thumb`, a 400 px box; more in `fleet_settings`). An unknown one rejects with
   * BAD_ARGUMENT naming the known ones.
   */
  normalizeImage(
    image: { userId: string; uploadId: string; target: 'body' | 'garment'; imageId: string; profile?: NormalizeProfileName },
    options?: JobOptions,
  ): Promise<EnqueuedJob>;
  processGarment(garment: { userId: string; uploadId: string; garmentId: string }, options?: JobOptions): Promise<ProcessedGarment>;
  purgeAccount(userId: string, options?: JobOptions): Promise<EnqueuedJob>;
  /**
   * Jobs that run after one another, named locally, inserted all or none (`jobs.enqueueGraph`): a
   * cycle, a name the graph does not hold or an id that does not exist rejects with BAD_ARGUMENT.
   * With `idempotencyKey`, sending the graph again answers its first jobs (and is safe to resend).
   */
  enqueueGraph(jobs: GraphJob[], options?: { idempotencyKey?: string }): Promise<EnqueuedGraph>;
  status(jobId: number): Promise<JobStatus>;
  wait(jobId: number, options?: { timeoutMs?: number }): Promise<WaitResult>;
  cancel(jobId: number): Promise<CancelResult>;
  stats(options?: { windowSeconds?: number }): Promise<QueueStats>;
  /** Rejects with INVALID_CATEGORY, INSUFFICIENT_CREDITS, SUBSCRIPTION_EXPIRED, INVALID_TOKEN, TOKEN_ALREADY_USED or RENDER_ID_CONFLICT (the id is another requester's render). */
  requestRender(request: RenderRequest, trace?: TraceOptions): Promise<Render>;
  renderStatus(renderId: string): Promise<Render>;
  waitRender(renderId: string, options?: { timeoutMs?: number }): Promise<RenderWaitResult>;
  /** A thumbs-down on a complete render refunds its credit once. */
  /**
   * Feedback is a user's: an onboarding render takes it once its token is linked (`linkAccount`);
   * before that it rejects with NOT_FOUND saying so. `vote` other than up/down: BAD_ARGUMENT listing them.
   */
  renderFeedback(feedback: { renderId: string; userId: string; vote: 'up' | 'down'; category?: string }): Promise<FeedbackResult>;
  listRenders(userId: string, options?: { limit?: number }): Promise<RenderList>;
  issueToken(): Promise<OnboardingToken>;
  linkAccount(link: { ephemeralToken: string; userId: string }): Promise<LinkResult>;
  /** A user's balance ("credits left") and whether renders are free for them now; zeros for a user never seen. */
  credits(userId: string): Promise<CreditBalance>;
  /**
   * A PUT URL straight to the image store (`upload.presign`, S3 only: STORAGE_NOT_PRESIGNABLE with files): the app
   * uploads there, then requestRender or normalizeImage names `uploadId`. INVALID_TOKEN for a token not live.
   */
  presignUpload(upload: UploadPresignRequest): Promise<PresignedUpload>;
  /**
   * A GET URL for one of a user's images (`image.url`), to redirect to instead of proxying: `userId` owns the tree
   * (a tokenId for onboarding photos); for a render, its user, and it must be complete (RENDER_NOT_COMPLETE, NOT_FOUND).
   */
  imageUrl(image: { userId: string; kind: ImageKind; id: string; expiresInSeconds?: number }): Promise<PresignedUrl>;
  /** Operators (operate role): failed renders pending again, credit reserved again, one by renderId (a refusal rejects:
   * INSUFFICIENT_CREDITS, RENDER_NOT_RETRYABLE, NOT_FOUND) or many by filter (each refusal in `refused`); `since` ISO 8601. */
  retryRenders(retry: { renderId?: string; errorCode?: string; failureCode?: string; provider?: string; since?: string; limit?: number; dryRun?: boolean }): Promise<RenderRetryResult>;
  /** Job control: `read` or `operate` to look, `operate` to change; others reject with FORBIDDEN. */
  getJob(jobId: number): Promise<JobStatus>;
  /** Newest first; pass nextCursor back for the next page (null: no more). */
  listJobs(filter?: JobFilter, options?: { limit?: number; cursor?: string }): Promise<JobsPage>;
  /** A dead or cancelled job back to available; JOB_NOT_RETRYABLE otherwise. */
  retryJob(jobId: number, options?: { runAt?: string }): Promise<JobStatus>;
  retryJobs(filter: JobFilter, options: { limit: number; dryRun?: boolean }): Promise<RetryJobsResult>;
  /** Deletes a finished job; JOB_NOT_FINISHED otherwise. */
  discardJob(jobId: number): Promise<DiscardResult>;
  discardJobs(filter: JobFilter, options: { limit: number; dryRun?: boolean }): Promise<BulkResult>;
  pause(target: { kind: string; queue?: never } | { queue: string; kind?: never }): Promise<PauseResult>;
  resume(target: { kind: string; queue?: never } | { queue: string; kind?: never }): Promise<PauseResult>;
  listAudit(options?: { limit?: number; cursor?: string }): Promise<AuditPage>;
  /** The fleet-wide limits and their use (a read or operate token). */
  limits(): Promise<LimitsResult>;
  /** Creates or replaces a limit (an operate token); every worker honours it from its next claim. */
  setLimit(limit: { key: string; maxRunning?: number; rate?: number; rateWindowSeconds?: number }): Promise<LimitsResult>;
  /** Stops limiting a key's jobs (an operate token). */
  removeLimit(key: string): Promise<LimitsResult>;
  /** Closes every connection and stops reconnecting; requests in flight or waiting reject with ConnectionClosedError. */
  close(): void;
}

/** The body of a render's completion callback. */
export interface RenderFinishedEvent {
  type: 'render.finished';
  renderId: string;
  /** null for an onboarding render not yet linked to an account. */
  userId: string | null;
  status: 'complete' | 'failed';
  errorCode: string | null;
  resultPath: string | null;
  /** The garment image sent to the provider: its cut-out (true), its normalised photo (false), or null when none was read. */
  garmentCutout: boolean | null;
  createdAt: string;
  finishedAt: string;
}

/** The body of a job's completion callback. */
export interface JobFinishedEvent {
  type: 'job.finished';
  jobId: number;
  kind: string;
  state: 'completed' | 'dead' | 'cancelled';
  attempt: number;
  /** The last failed attempt's code; null when completed. */
  errorCode: string | null;
  result: JsonValue | null;
  createdAt: string;
  finishedAt: string;
}

export type CallbackEvent = RenderFinishedEvent | JobFinishedEvent;

export class CallbackVerificationError extends Error {
  code: 'MISSING_HEADER' | 'BAD_TIMESTAMP' | 'STALE_TIMESTAMP' | 'BAD_SECRET' | 'BAD_SIGNATURE';
}

/**
 * Verifies a signed call from the fleet (a completion callback or an `http.request` job):
 * `headers` as Node's `req.headers` or a Fetch `Headers`, `body` the raw bytes as received,
 * `secret` the `whsec_` secret (or several, during a rotation). Returns the `webhook-id` (the same
 * on every redelivery: store it to drop repeats), the timestamp and the parsed body; throws
 * `CallbackVerificationError` when the call is not authentic or is older than `toleranceSeconds` (300).
 */
export function verifyCallback<Event = CallbackEvent>(
  headers: Record<string, string | string[] | undefined> | { get(name: string): string | null },
  body: Uint8Array | string,
  secret: string | string[],
  options?: { toleranceSeconds?: number; now?: number },
): { id: string; timestamp: number; event: Event | null };
