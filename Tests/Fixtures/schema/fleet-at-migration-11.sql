-- A fleet's database as the release with migrations 1 to 11 leaves it: its schema, and rows in
-- every table (jobs in each state, a render mid-flight at fal with its reservation and ledger, a
-- read token named `default`, a console session, pauses, limits, slots). pg_dump of PostgreSQL 15;
-- SchemaUpgradeTests restores it with psql and upgrades it with today's migrations.
--
-- PostgreSQL database dump
--

\restrict JGD3KTECrnutLcKZJRPxmSeDMYA8Nh1fcer7dwh68oF5TvHAucnFP2laxEbyDdh

-- Dumped from database version 15.18 (Debian 15.18-0+deb12u1)
-- Dumped by pg_dump version 15.18 (Debian 15.18-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Name: job_state; Type: TYPE; Schema: public; Owner: -
--

CREATE TYPE public.job_state AS ENUM (
    'available',
    'running',
    'completed',
    'dead',
    'cancelled'
);


--
-- Name: render_status; Type: TYPE; Schema: public; Owner: -
--

CREATE TYPE public.render_status AS ENUM (
    'pending',
    'processing',
    'complete',
    'failed'
);


--
-- Name: fleet_wire_time(timestamp with time zone); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.fleet_wire_time(at timestamp with time zone) RETURNS text
    LANGUAGE sql STABLE
    RETURN to_char((at AT TIME ZONE 'UTC'::text), 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'::text);


--
-- Name: jobs_enqueue_callback(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.jobs_enqueue_callback() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO jobs (kind, payload, priority, max_attempts, idempotency_key, trace_parent)
    VALUES ('callback.deliver', jsonb_build_object(
        'url', NEW.callback_url,
        'webhookId', 'msg_cb_job_' || NEW.id || '_' || NEW.attempt,
        'event', jsonb_build_object(
            'type', 'job.finished', 'jobId', NEW.id, 'kind', NEW.kind, 'state', NEW.state, 'attempt', NEW.attempt,
            'errorCode', CASE WHEN NEW.state = 'completed' THEN NULL ELSE NEW.errors -> -1 ->> 'code' END,
            'result', NEW.result,
            'createdAt', fleet_wire_time(NEW.created_at),
            'finishedAt', fleet_wire_time(coalesce(NEW.finished_at, now())))),
        1, 12, 'callback:job:' || NEW.id || ':' || NEW.attempt, NEW.trace_parent)
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING;
    PERFORM pg_notify('fleet_jobs', 'callback.deliver');
    RETURN NULL;
END $$;


--
-- Name: renders_enqueue_callback(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.renders_enqueue_callback() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO jobs (kind, payload, priority, max_attempts, idempotency_key, trace_parent)
    VALUES ('callback.deliver', jsonb_build_object(
        'url', NEW.callback_url,
        'webhookId', 'msg_cb_render_' || NEW.id,
        'event', jsonb_build_object(
            'type', 'render.finished', 'renderId', NEW.id, 'userId', NEW.user_id, 'status', NEW.status,
            'errorCode', NEW.error_code, 'resultPath', NEW.result_path,
            'createdAt', fleet_wire_time(NEW.created_at), 'finishedAt', fleet_wire_time(now()))),
        1, 12, 'callback:render:' || NEW.id, (SELECT trace_parent FROM jobs WHERE id = NEW.job_id))
    ON CONFLICT (idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING;
    PERFORM pg_notify('fleet_jobs', 'callback.deliver');
    RETURN NULL;
END $$;


SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: access_tokens; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.access_tokens (
    name text NOT NULL,
    role text NOT NULL,
    token_hash bytea NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    revoked_at timestamp with time zone,
    CONSTRAINT access_tokens_name_check CHECK ((name ~ '^[A-Za-z0-9._-]{1,64}$'::text)),
    CONSTRAINT access_tokens_role_check CHECK ((role = ANY (ARRAY['submit'::text, 'operate'::text, 'read'::text])))
);


--
-- Name: console_sessions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.console_sessions (
    secret_hash bytea NOT NULL,
    token_name text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL
);


--
-- Name: credit_ledger; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.credit_ledger (
    id bigint NOT NULL,
    key text NOT NULL,
    user_id text NOT NULL,
    render_id text,
    entry text NOT NULL,
    amount integer NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT credit_ledger_entry_check CHECK ((entry = ANY (ARRAY['grant'::text, 'reserve'::text, 'consume'::text, 'release'::text, 'refund'::text])))
);


--
-- Name: credit_ledger_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.credit_ledger ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.credit_ledger_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: credit_reservations; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.credit_reservations (
    render_id text NOT NULL,
    user_id text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: credits; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.credits (
    id text DEFAULT (gen_random_uuid())::text NOT NULL,
    user_id text NOT NULL,
    total_granted integer DEFAULT 0 NOT NULL,
    total_consumed integer DEFAULT 0 NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT credits_total_consumed_check CHECK ((total_consumed >= 0)),
    CONSTRAINT credits_total_granted_check CHECK ((total_granted >= 0))
);


--
-- Name: ephemeral_tokens; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ephemeral_tokens (
    id text NOT NULL,
    token_hash bytea NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    linked_user_id text,
    linked_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: fleet_settings; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.fleet_settings (
    key text NOT NULL,
    value jsonb NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: jobs; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.jobs (
    id bigint NOT NULL,
    kind text NOT NULL,
    queue text DEFAULT 'default'::text NOT NULL,
    state public.job_state DEFAULT 'available'::public.job_state NOT NULL,
    priority smallint DEFAULT 2 NOT NULL,
    attempt integer DEFAULT 0 NOT NULL,
    max_attempts integer DEFAULT 5 NOT NULL,
    run_at timestamp with time zone DEFAULT now() NOT NULL,
    payload jsonb DEFAULT '{}'::jsonb NOT NULL,
    result jsonb,
    errors jsonb DEFAULT '[]'::jsonb NOT NULL,
    idempotency_key text,
    lease_owner text,
    lease_expires_at timestamp with time zone,
    cancel_requested_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    limit_keys text[],
    callback_url text,
    last_error_code text,
    trace_parent text,
    CONSTRAINT jobs_lease_iff_running CHECK (((state = 'running'::public.job_state) = (lease_owner IS NOT NULL))),
    CONSTRAINT jobs_max_attempts_check CHECK ((max_attempts >= 1)),
    CONSTRAINT jobs_priority_check CHECK (((priority >= 0) AND (priority <= 9)))
)
WITH (fillfactor='85', autovacuum_vacuum_scale_factor='0.01', autovacuum_vacuum_cost_delay='0');


--
-- Name: jobs_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.jobs ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.jobs_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: limit_starts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.limit_starts (
    key text NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: operator_audit; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.operator_audit (
    id bigint NOT NULL,
    at timestamp with time zone DEFAULT now() NOT NULL,
    actor text NOT NULL,
    action text NOT NULL,
    target jsonb NOT NULL,
    affected bigint NOT NULL
);


--
-- Name: operator_audit_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.operator_audit ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.operator_audit_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: provider_events; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.provider_events (
    provider text NOT NULL,
    request_id text NOT NULL,
    payload jsonb NOT NULL,
    received_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: provider_latency; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.provider_latency (
    provider text NOT NULL,
    seconds double precision NOT NULL,
    samples bigint DEFAULT 1 NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT provider_latency_seconds_check CHECK ((seconds >= (0)::double precision))
);


--
-- Name: queue_limits; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.queue_limits (
    key text NOT NULL,
    max_running integer,
    rate integer,
    rate_window_seconds double precision DEFAULT 60 NOT NULL,
    updated_by text DEFAULT 'fleet'::text NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    throttled_rate integer,
    throttled_from integer,
    throttled_at timestamp with time zone,
    CONSTRAINT queue_limits_check CHECK (((max_running IS NOT NULL) OR (rate IS NOT NULL))),
    CONSTRAINT queue_limits_key_check CHECK ((key ~ '^[A-Za-z0-9._:-]{1,100}[*]?$'::text)),
    CONSTRAINT queue_limits_max_running_check CHECK ((max_running >= 0)),
    CONSTRAINT queue_limits_rate_check CHECK ((rate >= 0)),
    CONSTRAINT queue_limits_rate_window_seconds_check CHECK (((rate_window_seconds > (0)::double precision) AND (rate_window_seconds <= (3600)::double precision))),
    CONSTRAINT queue_limits_throttled_rate_check CHECK ((throttled_rate >= 1))
);


--
-- Name: queue_pauses; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.queue_pauses (
    scope text NOT NULL,
    name text NOT NULL,
    paused_by text NOT NULL,
    paused_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT queue_pauses_scope_check CHECK ((scope = ANY (ARRAY['kind'::text, 'queue'::text])))
);


--
-- Name: renders; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.renders (
    id text NOT NULL,
    user_id text,
    ephemeral_token_id text,
    owner_id text NOT NULL,
    garment_id text NOT NULL,
    body_photo_id text NOT NULL,
    category text NOT NULL,
    provider text NOT NULL,
    status public.render_status DEFAULT 'pending'::public.render_status NOT NULL,
    job_id bigint,
    provider_job_id text,
    provider_submission jsonb,
    result_path text,
    error_code text,
    charged boolean DEFAULT false NOT NULL,
    deadline_at timestamp with time zone NOT NULL,
    feedback text,
    feedback_category text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    callback_url text,
    CONSTRAINT renders_error_iff_failed CHECK (((status = 'failed'::public.render_status) = (error_code IS NOT NULL))),
    CONSTRAINT renders_feedback_check CHECK ((feedback = ANY (ARRAY['up'::text, 'down'::text]))),
    CONSTRAINT renders_owned CHECK (((user_id IS NOT NULL) OR (ephemeral_token_id IS NOT NULL)))
);


--
-- Name: schedule_slots; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.schedule_slots (
    entry text NOT NULL,
    slot_at timestamp with time zone NOT NULL,
    claimed_by text NOT NULL,
    claimed_at timestamp with time zone DEFAULT now() NOT NULL,
    job_id bigint,
    finished_at timestamp with time zone,
    error text
);


--
-- Name: schema_migrations; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: subscriptions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.subscriptions (
    id text DEFAULT (gen_random_uuid())::text NOT NULL,
    user_id text NOT NULL,
    apple_transaction_id text,
    status text NOT NULL,
    started_at timestamp with time zone,
    expires_at timestamp with time zone,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT subscriptions_status_check CHECK ((status = ANY (ARRAY['trial'::text, 'subscribed'::text, 'expired'::text, 'cancelled'::text])))
);


--
-- Name: workers; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.workers (
    id text NOT NULL,
    host text NOT NULL,
    pid integer NOT NULL,
    executable text NOT NULL,
    kinds text[] NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    last_heartbeat_at timestamp with time zone DEFAULT now() NOT NULL,
    stopped_at timestamp with time zone
);


--
-- Data for Name: access_tokens; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.access_tokens (name, role, token_hash, created_at, revoked_at) FROM stdin;
grafana	read	\\x0101010101010101010101010101010101010101010101010101010101010101	2026-11-28 00:56:36.981509+00	\N
default	read	\\x0202020202020202020202020202020202020202020202020202020202020202	2026-11-28 00:56:36.981509+00	\N
backend	submit	\\x0303030303030303030303030303030303030303030303030303030303030303	2026-11-28 00:56:36.981509+00	2026-11-28 00:56:36.982011+00
\.


--
-- Data for Name: console_sessions; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.console_sessions (secret_hash, token_name, created_at, expires_at) FROM stdin;
\\x0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f0f	grafana	2026-11-28 00:56:36.982231+00	2026-11-28 01:56:36.982231+00
\.


--
-- Data for Name: credit_ledger; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.credit_ledger (id, key, user_id, render_id, entry, amount, created_at) FROM stdin;
1	reserve:r0	u1	r0	reserve	1	2026-11-28 00:56:36.975178+00
2	consume:r0	u1	r0	consume	1	2026-11-28 00:56:36.975178+00
3	reserve:r1	u1	r1	reserve	1	2026-11-28 00:56:36.975178+00
4	grant:link:t-old	u1	\N	grant	3	2026-11-28 00:56:36.975178+00
\.


--
-- Data for Name: credit_reservations; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.credit_reservations (render_id, user_id, created_at) FROM stdin;
r1	u1	2026-11-28 00:56:36.974888+00
\.


--
-- Data for Name: credits; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.credits (id, user_id, total_granted, total_consumed, created_at, updated_at) FROM stdin;
d2e82e84-2cdd-4fe8-97dd-0b21a54b187b	u1	5	1	2026-11-28 00:56:36.973437+00	2026-11-28 00:56:36.973437+00
\.


--
-- Data for Name: ephemeral_tokens; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.ephemeral_tokens (id, token_hash, expires_at, linked_user_id, linked_at, created_at) FROM stdin;
t-old	\\xabababababababababababababababababababababababababababababababab	2026-11-29 00:56:36.975613+00	u1	2026-11-27 00:56:36.975613+00	2026-11-28 00:56:36.975613+00
t-live	\\xcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd	2026-11-29 00:56:36.975613+00	\N	\N	2026-11-28 00:56:36.975613+00
\.


--
-- Data for Name: fleet_settings; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.fleet_settings (key, value, updated_at) FROM stdin;
render.categories	["tops", "bottoms", "dresses", "shoes", "outerwear"]	2026-11-28 00:56:21.574171+00
render.provider	"fal-fashn"	2026-11-28 00:56:21.574171+00
\.


--
-- Data for Name: jobs; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.jobs (id, kind, queue, state, priority, attempt, max_attempts, run_at, payload, result, errors, idempotency_key, lease_owner, lease_expires_at, cancel_requested_at, created_at, started_at, finished_at, limit_keys, callback_url, last_error_code, trace_parent) FROM stdin;
1	drill.noop	default	completed	2	1	5	2026-11-28 00:56:36.968256+00	{"n": 1}	{"ok": true}	[]	order-1	\N	\N	\N	2026-11-27 21:56:36.968256+00	\N	2026-11-27 21:56:36.968256+00	{}	\N	\N	\N
2	image.normalize	default	dead	2	5	5	2026-11-28 00:56:36.968256+00	{"target": "body", "userId": "u1", "imageId": "b1", "uploadId": "up1"}	\N	[{"at": "2026-11-27T10:00:00Z", "code": "IMAGE_INVALID", "error": "not an image", "attempt": 5}]	\N	\N	\N	\N	2026-11-27 22:56:36.968256+00	\N	2026-11-27 22:56:36.968256+00	{}	https://backend.example/cb	IMAGE_INVALID	00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
3	garment.cutout	default	cancelled	2	0	5	2026-11-28 00:56:36.968256+00	{"userId": "u1", "garmentId": "g1"}	\N	[]	\N	\N	\N	\N	2026-11-27 23:56:36.968256+00	\N	2026-11-27 23:56:36.968256+00	{}	\N	\N	\N
4	drill.script	bulk	available	4	1	5	2026-11-28 00:56:36.968256+00	{"steps": ["fail"]}	\N	[{"at": "2026-11-27T11:00:00Z", "code": "DRILL_FAILED", "error": "scripted", "attempt": 1}]	script-7	\N	\N	\N	2026-11-28 00:46:36.968256+00	\N	\N	{}	\N	DRILL_FAILED	\N
5	render.run	default	running	2	1	5	2026-11-28 00:56:36.972453+00	{"renderId": "r1"}	\N	[]	render:r1	w-render-1	2026-11-28 00:57:06.972453+00	\N	2026-11-28 00:56:36.972453+00	2026-11-28 00:56:36.972453+00	\N	{provider:fal-fashn,user:u1}	\N	\N	\N
\.


--
-- Data for Name: limit_starts; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.limit_starts (key, started_at) FROM stdin;
provider:fal-fashn	2026-11-28 00:56:36.983264+00
\.


--
-- Data for Name: operator_audit; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.operator_audit (id, at, actor, action, target, affected) FROM stdin;
1	2026-11-28 00:56:36.9835+00	ops	queue.pause	{"kind": "garment.cutout"}	1
\.


--
-- Data for Name: provider_events; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.provider_events (provider, request_id, payload, received_at) FROM stdin;
fal	fal-req-0	{"status": "OK", "request_id": "fal-req-0"}	2026-11-28 00:56:36.980617+00
\.


--
-- Data for Name: provider_latency; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.provider_latency (provider, seconds, samples, updated_at) FROM stdin;
fal-fashn	11.5	40	2026-11-28 00:56:36.981112+00
\.


--
-- Data for Name: queue_limits; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.queue_limits (key, max_running, rate, rate_window_seconds, updated_by, updated_at, throttled_rate, throttled_from, throttled_at) FROM stdin;
provider:fal-fashn	40	\N	60	fleet-defaults	2026-11-28 00:56:36.982827+00	\N	\N	\N
user:*	2	\N	60	fleet-defaults	2026-11-28 00:56:36.982827+00	\N	\N	\N
\.


--
-- Data for Name: queue_pauses; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.queue_pauses (scope, name, paused_by, paused_at) FROM stdin;
kind	garment.cutout	ops	2026-11-28 00:56:36.982559+00
\.


--
-- Data for Name: renders; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.renders (id, user_id, ephemeral_token_id, owner_id, garment_id, body_photo_id, category, provider, status, job_id, provider_job_id, provider_submission, result_path, error_code, charged, deadline_at, feedback, feedback_category, created_at, updated_at, callback_url) FROM stdin;
r1	u1	\N	u1	g1	b1	tops	fal-fashn	processing	5	fal-req-1	{"jobID": "fal-req-1", "state": {"falQueue": {"_0": {"cancel": "https://queue.fal.run/x/cancel", "status": "https://queue.fal.run/x/status", "response": "https://queue.fal.run/x"}}}, "provider": "fal-fashn"}	\N	\N	t	2026-11-28 00:57:06.973765+00	\N	\N	2026-11-28 00:56:36.973765+00	2026-11-28 00:56:36.973765+00	https://backend.example/render-cb
r0	u1	\N	u1	g0	b0	dresses	local	complete	\N	\N	\N	users/u1/renders/r0.jpg	\N	t	2026-11-27 00:56:36.974707+00	up	\N	2026-11-27 00:56:36.974707+00	2026-11-28 00:56:36.974707+00	\N
\.


--
-- Data for Name: schedule_slots; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.schedule_slots (entry, slot_at, claimed_by, claimed_at, job_id, finished_at, error) FROM stdin;
leases.rescue	2026-11-28 00:56:00+00	dispatcher-1	2026-11-28 00:56:36.983845+00	\N	2026-11-28 00:56:36.983845+00	\N
\.


--
-- Data for Name: schema_migrations; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.schema_migrations (version, name, applied_at) FROM stdin;
1	job queue	2026-11-28 00:56:21.569484+00
2	renders and credits	2026-11-28 00:56:21.574171+00
3	schedule slots	2026-11-28 00:56:21.58434+00
4	job control	2026-11-28 00:56:21.585624+00
5	concurrency limits	2026-11-28 00:56:21.594866+00
6	provider latency	2026-11-28 00:56:21.599706+00
7	completion callbacks	2026-11-28 00:56:21.60327+00
8	console sessions	2026-11-28 00:56:21.605555+00
9	console indexes	2026-11-28 00:56:21.606691+00
10	job traces	2026-11-28 00:56:21.608891+00
11	render callback traces	2026-11-28 00:56:21.609305+00
\.


--
-- Data for Name: subscriptions; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.subscriptions (id, user_id, apple_transaction_id, status, started_at, expires_at, created_at, updated_at) FROM stdin;
e2ff6551-0971-4d09-a190-2a195617da64	u2	\N	subscribed	2026-11-18 00:56:36.972971+00	2026-12-18 00:56:36.972971+00	2026-11-28 00:56:36.972971+00	2026-11-28 00:56:36.972971+00
\.


--
-- Data for Name: workers; Type: TABLE DATA; Schema: public; Owner: -
--

COPY public.workers (id, host, pid, executable, kinds, started_at, last_heartbeat_at, stopped_at) FROM stdin;
w-render-1	node-a	4101	render-worker	{render.run}	2026-11-28 00:56:36.966713+00	2026-11-28 00:56:36.966713+00	\N
w-image-1	node-b	4102	image-worker	{image.normalize,garment.cutout}	2026-11-28 00:56:36.966713+00	2026-11-27 22:56:36.966713+00	2026-11-27 23:56:36.967814+00
\.


--
-- Name: credit_ledger_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.credit_ledger_id_seq', 4, true);


--
-- Name: jobs_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.jobs_id_seq', 5, true);


--
-- Name: operator_audit_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.operator_audit_id_seq', 1, true);


--
-- Name: access_tokens access_tokens_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.access_tokens
    ADD CONSTRAINT access_tokens_pkey PRIMARY KEY (name);


--
-- Name: access_tokens access_tokens_token_hash_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.access_tokens
    ADD CONSTRAINT access_tokens_token_hash_key UNIQUE (token_hash);


--
-- Name: console_sessions console_sessions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.console_sessions
    ADD CONSTRAINT console_sessions_pkey PRIMARY KEY (secret_hash);


--
-- Name: credit_ledger credit_ledger_key_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.credit_ledger
    ADD CONSTRAINT credit_ledger_key_key UNIQUE (key);


--
-- Name: credit_ledger credit_ledger_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.credit_ledger
    ADD CONSTRAINT credit_ledger_pkey PRIMARY KEY (id);


--
-- Name: credit_reservations credit_reservations_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.credit_reservations
    ADD CONSTRAINT credit_reservations_pkey PRIMARY KEY (render_id);


--
-- Name: credits credits_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.credits
    ADD CONSTRAINT credits_pkey PRIMARY KEY (id);


--
-- Name: credits credits_user_id_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.credits
    ADD CONSTRAINT credits_user_id_key UNIQUE (user_id);


--
-- Name: ephemeral_tokens ephemeral_tokens_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ephemeral_tokens
    ADD CONSTRAINT ephemeral_tokens_pkey PRIMARY KEY (id);


--
-- Name: ephemeral_tokens ephemeral_tokens_token_hash_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ephemeral_tokens
    ADD CONSTRAINT ephemeral_tokens_token_hash_key UNIQUE (token_hash);


--
-- Name: fleet_settings fleet_settings_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.fleet_settings
    ADD CONSTRAINT fleet_settings_pkey PRIMARY KEY (key);


--
-- Name: jobs jobs_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.jobs
    ADD CONSTRAINT jobs_pkey PRIMARY KEY (id);


--
-- Name: operator_audit operator_audit_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.operator_audit
    ADD CONSTRAINT operator_audit_pkey PRIMARY KEY (id);


--
-- Name: provider_events provider_events_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.provider_events
    ADD CONSTRAINT provider_events_pkey PRIMARY KEY (provider, request_id);


--
-- Name: provider_latency provider_latency_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.provider_latency
    ADD CONSTRAINT provider_latency_pkey PRIMARY KEY (provider);


--
-- Name: queue_limits queue_limits_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.queue_limits
    ADD CONSTRAINT queue_limits_pkey PRIMARY KEY (key);


--
-- Name: queue_pauses queue_pauses_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.queue_pauses
    ADD CONSTRAINT queue_pauses_pkey PRIMARY KEY (scope, name);


--
-- Name: renders renders_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.renders
    ADD CONSTRAINT renders_pkey PRIMARY KEY (id);


--
-- Name: schedule_slots schedule_slots_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.schedule_slots
    ADD CONSTRAINT schedule_slots_pkey PRIMARY KEY (entry, slot_at);


--
-- Name: schema_migrations schema_migrations_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);


--
-- Name: subscriptions subscriptions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.subscriptions
    ADD CONSTRAINT subscriptions_pkey PRIMARY KEY (id);


--
-- Name: workers workers_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.workers
    ADD CONSTRAINT workers_pkey PRIMARY KEY (id);


--
-- Name: console_sessions_expires_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX console_sessions_expires_idx ON public.console_sessions USING btree (expires_at);


--
-- Name: credit_ledger_user_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX credit_ledger_user_idx ON public.credit_ledger USING btree (user_id, created_at);


--
-- Name: credit_reservations_user_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX credit_reservations_user_idx ON public.credit_reservations USING btree (user_id);


--
-- Name: ephemeral_tokens_expiry_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX ephemeral_tokens_expiry_idx ON public.ephemeral_tokens USING btree (expires_at) WHERE (linked_user_id IS NULL);


--
-- Name: jobs_claim_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX jobs_claim_idx ON public.jobs USING btree (kind, priority, run_at, id) WHERE (state = 'available'::public.job_state);


--
-- Name: jobs_dead_code_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX jobs_dead_code_idx ON public.jobs USING btree (last_error_code, id) WHERE (state = 'dead'::public.job_state);


--
-- Name: jobs_dead_groups_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX jobs_dead_groups_idx ON public.jobs USING btree (kind, last_error_code, finished_at, id) WHERE (state = 'dead'::public.job_state);


--
-- Name: jobs_failed_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX jobs_failed_idx ON public.jobs USING btree (state, id) WHERE (state = ANY (ARRAY['dead'::public.job_state, 'cancelled'::public.job_state]));


--
-- Name: jobs_failed_kind_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX jobs_failed_kind_idx ON public.jobs USING btree (state, kind, id) WHERE (state = ANY (ARRAY['dead'::public.job_state, 'cancelled'::public.job_state]));


--
-- Name: jobs_idempotency_key_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX jobs_idempotency_key_idx ON public.jobs USING btree (idempotency_key) WHERE (idempotency_key IS NOT NULL);


--
-- Name: jobs_lease_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX jobs_lease_idx ON public.jobs USING btree (lease_expires_at) WHERE (state = 'running'::public.job_state);


--
-- Name: jobs_retrying_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX jobs_retrying_idx ON public.jobs USING btree (kind) WHERE ((state = 'available'::public.job_state) AND (attempt > 0));


--
-- Name: jobs_running_limited_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX jobs_running_limited_idx ON public.jobs USING btree (limit_keys) WHERE ((state = 'running'::public.job_state) AND (limit_keys IS NOT NULL));


--
-- Name: limit_starts_key_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX limit_starts_key_idx ON public.limit_starts USING btree (key, started_at);


--
-- Name: renders_one_per_token_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX renders_one_per_token_idx ON public.renders USING btree (ephemeral_token_id) WHERE (ephemeral_token_id IS NOT NULL);


--
-- Name: renders_open_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX renders_open_idx ON public.renders USING btree (deadline_at) WHERE (status = ANY (ARRAY['pending'::public.render_status, 'processing'::public.render_status]));


--
-- Name: renders_provider_job_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX renders_provider_job_idx ON public.renders USING btree (provider, provider_job_id) WHERE (provider_job_id IS NOT NULL);


--
-- Name: renders_user_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX renders_user_idx ON public.renders USING btree (user_id, created_at DESC);


--
-- Name: schedule_slots_slot_at_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX schedule_slots_slot_at_idx ON public.schedule_slots USING btree (slot_at);


--
-- Name: subscriptions_user_idx; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX subscriptions_user_idx ON public.subscriptions USING btree (user_id);


--
-- Name: jobs jobs_callback; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER jobs_callback AFTER UPDATE OF state ON public.jobs FOR EACH ROW WHEN (((new.callback_url IS NOT NULL) AND (new.state = ANY (ARRAY['completed'::public.job_state, 'dead'::public.job_state, 'cancelled'::public.job_state])) AND (old.state = ANY (ARRAY['available'::public.job_state, 'running'::public.job_state])))) EXECUTE FUNCTION public.jobs_enqueue_callback();


--
-- Name: renders renders_callback; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER renders_callback AFTER UPDATE OF status ON public.renders FOR EACH ROW WHEN (((new.callback_url IS NOT NULL) AND (new.status = ANY (ARRAY['complete'::public.render_status, 'failed'::public.render_status])) AND (old.status = ANY (ARRAY['pending'::public.render_status, 'processing'::public.render_status])))) EXECUTE FUNCTION public.renders_enqueue_callback();


--
-- Name: renders renders_ephemeral_token_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.renders
    ADD CONSTRAINT renders_ephemeral_token_id_fkey FOREIGN KEY (ephemeral_token_id) REFERENCES public.ephemeral_tokens(id) ON DELETE CASCADE;


--
-- PostgreSQL database dump complete
--

\unrestrict JGD3KTECrnutLcKZJRPxmSeDMYA8Nh1fcer7dwh68oF5TvHAucnFP2laxEbyDdh

