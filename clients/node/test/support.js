'use strict';
// What the Node client's tests share: the built executables and database they run against,
// free loopback ports, and waiting for a child process to end.

const net = require('node:net');

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

module.exports = { binDir, databaseURL, sleep, freePort, exited };
