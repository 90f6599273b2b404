'use strict';
// What the Node client's tests share: the built executables and database they run against,
// free loopback ports, waiting for a child process to end, and a dispatcher with workers.

const net = require('node:net');
const path = require('node:path');
const { spawn, execFileSync } = require('node:child_process');

const binDir = process.env.DISPATCHER_BIN_DIR;
const databaseURL = process.env.DATABASE_URL;
if (!binDir || !databaseURL) throw new Error('set DISPATCHER_BIN_DIR and DATABASE_URL (scripts/test.sh does)');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** A loopback TCP port nothing listens on right now, asked of the kernel. */
function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    }).on('error', reject);
  });
}

/** Resolves with the exit code (or the signal's name) once the child has ended. */
function exited(child) {
  return new Promise((resolve) => child.exitCode !== null || child.signalCode !== null
    ? resolve(child.exitCode ?? child.signalCode)
    : child.once('exit', (code, signal) => resolve(code ?? signal)));
}

/**
 * A new, empty database beside DATABASE_URL's (its name with `_suffix`), made with psql: a test
 * that runs workers has its own, so they never take the jobs of the test files running beside it.
 */
function freshDatabase(suffix) {
  const url = new URL(databaseURL);
  const name = `${url.pathname.slice(1)}_${suffix}`;
  const admin = new URL(databaseURL);
  admin.pathname = '/postgres';
  execFileSync('psql', [admin.href, '-q', '-c', `DROP DATABASE IF EXISTS "${name}"`, '-c', `CREATE DATABASE "${name}"`],
    { env: { ...process.env, PGOPTIONS: '--client-min-messages=warning' }, stdio: ['ignore', 'ignore', 'inherit'] });
  url.pathname = `/${name}`;
  return url.href;
}

/**
 * Starts `dispatcher run` on a free TCP port with `token`, a Unix socket and a free HTTP port, and
 * resolves once it answers on the socket. `extra`: more environment (FLEET_STORAGE_ROOT…).
 */
async function startDispatcher({ token, socketPath, database = databaseURL, extra = {} }) {
  const { DispatcherClient } = require('..');
  const port = await freePort();
  const httpPort = await freePort(); // the default 9090 may be taken on a shared machine
  const child = spawn(path.join(binDir, 'dispatcher'), ['run'], {
    env: {
      ...process.env, DATABASE_URL: database, FLEET_LOG_LEVEL: 'warning', FLEET_DISPATCHER_TCP: `127.0.0.1:${port}`,
      FLEET_DISPATCHER_SOCKET: socketPath, FLEET_DISPATCHER_TOKEN: token, FLEET_HTTP_ADDRESS: `127.0.0.1:${httpPort}`, ...extra,
    },
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  const deadline = Date.now() + 60_000;
  for (;;) {
    try {
      (await DispatcherClient.connect({ path: socketPath, reconnect: false })).close();
      return { child, port };
    } catch (error) {
      if (Date.now() > deadline || child.exitCode !== null) throw new Error(`the dispatcher did not start: ${error}`);
      await sleep(100);
    }
  }
}

/** Starts a worker executable (image-worker, render-worker, fleet-drill) on the test database. */
function startWorker(executable, { database = databaseURL, extra = {} } = {}) {
  return spawn(path.join(binDir, executable), [], {
    env: { ...process.env, DATABASE_URL: database, FLEET_LOG_LEVEL: 'warning', FLEET_POLL_INTERVAL_MS: '200', FLEET_HTTP_ADDRESS: 'off', ...extra },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
}

/**
 * The Ceph gateway of scripts/s3.sh (the one the Swift tests start: .data/s3-test on
 * FLEET_TEST_S3_PORT, default 17480; started here when it is not running, left running as they
 * leave it), as a dispatcher's environment: FLEET_STORAGE below `prefix`, the AWS CLI's variables.
 */
function s3Storage(prefix) {
  const repository = path.resolve(__dirname, '../../..');
  const output = execFileSync(path.join(repository, 'scripts/s3.sh'),
    ['start', '--dir', path.join(repository, '.data/s3-test'), '--port', process.env.FLEET_TEST_S3_PORT ?? '17480'], { encoding: 'utf8' });
  const exported = Object.fromEntries([...output.matchAll(/^export (\w+)=(.*)$/gm)].map((match) => [match[1], match[2]]));
  return {
    FLEET_STORAGE: `s3://${exported.S3_BUCKET}/${prefix}`, AWS_ENDPOINT_URL_S3: exported.S3_ENDPOINT, AWS_REGION: exported.S3_REGION,
    AWS_ACCESS_KEY_ID: exported.S3_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY: exported.S3_SECRET_ACCESS_KEY,
  };
}

/** SIGTERM, and the exit code once it has drained. */
async function stop(child) {
  if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
  return exited(child);
}

module.exports = { binDir, databaseURL, sleep, freePort, exited, freshDatabase, startDispatcher, startWorker, stop, s3Storage };
