'use strict';
// TLS on the dispatcher's TCP listener, with a throwaway CA made by openssl: DISPATCHER_BIN_DIR holds
// the built executables, DATABASE_URL an existing database.

const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const { spawn, execFileSync } = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const { DispatcherClient, ConnectionClosedError } = require('..');

const { binDir, databaseURL, sleep, freePort, exited } = require('./support');

const token = crypto.randomBytes(24).toString('hex');
let folder;
const file = (name) => path.join(folder, name);
const pem = (name) => fs.readFileSync(file(name));



/** A CA, a server certificate for 127.0.0.1 and localhost, a client certificate, and a second CA with a client certificate of its own. */
before(() => {
  folder = fs.mkdtempSync(path.join(os.tmpdir(), 'dispatcher-node-tls-'));
  const openssl = (args) => execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  fs.writeFileSync(file('server.ext'), 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n');
  fs.writeFileSync(file('client.ext'), 'extendedKeyUsage=clientAuth\n');
  const newKey = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  for (const ca of ['ca', 'other-ca']) {
    openssl(['req', '-x509', ...newKey, '-keyout', file(`${ca}.key`), '-out', file(`${ca}.pem`), '-days', '1', '-subj', `/CN=${ca}`]);
  }
  for (const [name, ca, ext] of [['server', 'ca', 'server.ext'], ['client', 'ca', 'client.ext'], ['stranger', 'other-ca', 'client.ext']]) {
    openssl(['req', ...newKey, '-keyout', file(`${name}.key`), '-out', file(`${name}.csr`), '-subj', `/CN=${name}`]);
    openssl(['x509', '-req', '-in', file(`${name}.csr`), '-CA', file(`${ca}.pem`), '-CAkey', file(`${ca}.key`), '-CAcreateserial',
      '-out', file(`${name}.pem`), '-days', '1', '-extfile', file(ext)]);
  }
});

after(() => {
  fs.rmSync(folder, { recursive: true, force: true });
});

/** Runs a dispatcher with TLS on TCP and no Unix socket for the body. */
async function withDispatcher(extra, body) {
  const port = await freePort();
  const httpPort = await freePort();
  const child = spawn(path.join(binDir, 'dispatcher'), ['run'], {
    env: {
      ...process.env, DATABASE_URL: databaseURL, FLEET_LOG_LEVEL: 'error',
      FLEET_DISPATCHER_TCP: `127.0.0.1:${port}`, FLEET_DISPATCHER_SOCKET: 'off', FLEET_DISPATCHER_TOKEN: token,
      FLEET_HTTP_ADDRESS: `127.0.0.1:${httpPort}`, FLEET_DISPATCHER_TLS_CERT: file('server.pem'), FLEET_DISPATCHER_TLS_KEY: file('server.key'),
      ...extra,
    },
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  try {
    // Started once the port accepts connections (TLS or not, nothing is read yet).
    const deadline = Date.now() + 60_000;
    for (;;) {
      const open = await new Promise((resolve) => {
        const socket = net.createConnection({ host: '127.0.0.1', port }, () => { socket.destroy(); resolve(true); });
        socket.on('error', () => resolve(false));
      });
      if (open) break;
      if (Date.now() > deadline || child.exitCode !== null) throw new Error('the dispatcher did not start');
      await sleep(100);
    }
    await body(port);
  } finally {
    child.kill('SIGTERM');
    assert.equal(await exited(child), 0);
  }
}

/** The connect error's own cause: the TLS error behind the ConnectionClosedError. */
function verificationFailure(error) {
  const cause = error instanceof ConnectionClosedError ? error.cause : error;
  return /CERT|VERIFY|SIGNATURE|self.signed/i.test(`${cause?.code} ${cause?.message}`);
}

test('TLS: verified with the CA, auth and ping; no CA or another CA fails verification; a plain client gets no greeting', async () => {
  await withDispatcher({ FLEET_DISPATCHER_IDLE_TIMEOUT_SECONDS: '1' }, async (port) => {
    const client = await DispatcherClient.connect({ host: '127.0.0.1', port, token, tls: { ca: pem('ca.pem') } });
    try {
      assert.equal(client.greeting.authRequired, true);
      assert.equal((await client.ping()).pong, true);
      assert.equal((await client.enqueue('drill.noop', {}, { delaySeconds: 3600 })).isNew, true); // authenticated
      // Reconnecting uses TLS too: the idle close, then a call.
      const reconnected = new Promise((resolve) => client.once('reconnect', resolve));
      await sleep(2000);
      assert.equal((await client.stats()).windowSeconds, 3600);
      await reconnected;
    } finally {
      client.close();
    }
    await assert.rejects(DispatcherClient.connect({ host: '127.0.0.1', port, token, tls: {} }),
      (error) => verificationFailure(error) || assert.fail(`not a verification error: ${error} / ${error.cause}`));
    await assert.rejects(DispatcherClient.connect({ host: '127.0.0.1', port, token, tls: { ca: pem('other-ca.pem') } }),
      (error) => verificationFailure(error) || assert.fail(`not a verification error: ${error} / ${error.cause}`));
    // The certificate names 127.0.0.1 and localhost, nothing else.
    await assert.rejects(DispatcherClient.connect({ host: '127.0.0.1', port, token, tls: { ca: pem('ca.pem'), servername: 'dispatcher.example' } }),
      (error) => /altnames|ERR_TLS_CERT_ALTNAME_INVALID/.test(`${error.cause?.code} ${error.cause?.message}`) || assert.fail(String(error.cause)));
    const localhost = await DispatcherClient.connect({ host: 'localhost', port, token, tls: { ca: pem('ca.pem') } });
    assert.equal((await localhost.ping()).pong, true);
    localhost.close();
    await assert.rejects(DispatcherClient.connect({ host: '127.0.0.1', port, token, connectTimeoutMs: 3000 }));
  });
});

test('mutual TLS: a client without a certificate, or with one of another CA, is refused; with the CA\'s certificate it works', async () => {
  await withDispatcher({ FLEET_DISPATCHER_TLS_CLIENT_CA: file('ca.pem') }, async (port) => {
    const connect = (name) => DispatcherClient.connect({
      host: '127.0.0.1', port, token, connectTimeoutMs: 5000,
      tls: { ca: pem('ca.pem'), ...(name ? { cert: pem(`${name}.pem`), key: pem(`${name}.key`) } : {}) },
    });
    const client = await connect('client');
    assert.equal((await client.ping()).pong, true);
    assert.equal((await client.enqueue('drill.noop', {}, { delaySeconds: 3600 })).isNew, true);
    client.close();
    await assert.rejects(connect(null), ConnectionClosedError); // the handshake refused before the greeting
    await assert.rejects(connect('stranger'), ConnectionClosedError);
  });
});
