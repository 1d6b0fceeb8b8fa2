// examples/chat against Node's `ws` package (npm), a WebSocket client that
// is not ours, over ws:// and wss:// where the engine has TLS WebSocket:
// three sockets, a text message reaches all three (the sender included), a
// message sent in two fragments arrives whole, a ping gets its pong, UTF-8
// of 2 and 3 bytes survives, a message over --max-message-bytes closes its
// sender with 1009, and a stop closes the others with 1001 (chat exits 0).
// An engine without SRV_CAP_WEBSOCKET (or, over TLS, SRV_CAP_WEBSOCKET_TLS)
// must refuse /chat at start with a message: reported, not run.
// Usage: node tests/browser/chat-ws.mjs BUILD_DIR ENGINE
import { execSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startChat as startChatIn } from './chat-server.mjs';

const [buildDir, engine] = process.argv.slice(2);
if (!buildDir || !engine) {
  console.error('usage: node tests/browser/chat-ws.mjs BUILD_DIR ENGINE');
  process.exit(2);
}
const chatBin = path.join(buildDir, 'examples/chat/chat');
const fail = (msg) => { console.error(`FAIL: ${engine}: ${msg}`); process.exit(1); };
if (!existsSync(chatBin))
  fail(`${chatBin} not found`);
let WebSocket;
try {
  WebSocket = (await import('ws')).WebSocket;
} catch (e) {
  fail(`ws is not installed: run 'npm ci' in tests/browser (scripts/install-deps.sh does): ${e.message}`);
}

const children = new Set();
process.on('exit', () => children.forEach((c) => c.kill('SIGKILL')));
const within = (ms, what, p) => Promise.race([p, new Promise((_, rej) =>
  setTimeout(() => rej(new Error(`${what}: nothing within ${ms} ms`)), ms))]);

const startChat = (env) => startChatIn(chatBin, engine, env, children);

// A client that keeps what it receives: messages, and its close.
function connect(url, ca) {
  const ws = new WebSocket(url, ca ? { ca } : {});
  const c = { ws, msgs: [], waiters: [], closed: null };
  ws.on('message', (data, isBinary) => {
    c.msgs.push(isBinary ? data : data.toString('utf8'));
    c.waiters.forEach((w) => w());
  });
  c.open = new Promise((res, rej) => { ws.once('open', res); ws.once('error', rej); });
  c.close = new Promise((res) => ws.once('close', (code, reason) => {
    c.closed = { code, reason: reason.toString() };
    res(c.closed);
  }));
  return c;
}

function got(c, text) {
  return within(5000, `message "${text}"`, new Promise((res) => {
    const check = () => { if (c.msgs.includes(text)) res(); };
    c.waiters.push(check);
    check();
  }));
}

async function run(scheme, ca) {
  const env = scheme === 'wss' ? { SRV_TLS_CERT_FILE: cert, SRV_TLS_KEY_FILE: key } : {};
  const s = await startChat(env);
  if (s.refused) {
    console.log(`ok: ${engine} ${scheme}: /chat refused at start: ${s.refused.split('\n')[0]}`);
    s.child.kill('SIGKILL');
    return;
  }
  const url = `${scheme}://127.0.0.1:${s.port}/chat`;
  const cs = [connect(url, ca), connect(url, ca), connect(url, ca)];
  await within(5000, `${url}: open`, Promise.all(cs.map((c) => c.open)));
  // The 101 is out before the server runs on_open (the room's join): a pong proves it ran, as
  // on_open comes before any input on the socket.
  await within(5000, 'joined', Promise.all(cs.map((c) => new Promise((res) => {
    c.ws.once('pong', res);
    c.ws.ping('joined?');
  }))));

  cs[0].ws.send('hello from ws');
  await Promise.all(cs.map((c) => got(c, 'hello from ws')));
  cs[1].ws.send('frag', { fin: false });
  cs[1].ws.send('ment', { fin: true });
  await Promise.all(cs.map((c) => got(c, 'fragment')));
  cs[2].ws.send('olá, ünïcode ✓');
  await Promise.all(cs.map((c) => got(c, 'olá, ünïcode ✓')));
  const pong = new Promise((res) => cs[0].ws.once('pong', (d) => res(d.toString())));
  cs[0].ws.ping('are you there');
  const p = await within(5000, 'pong', pong);
  if (p !== 'are you there') fail(`${scheme}: pong carried "${p}"`);

  cs[2].ws.send('x'.repeat(101));
  const big = await within(5000, 'close after 101 bytes', cs[2].close);
  if (big.code !== 1009) fail(`${scheme}: a message over the limit closed with ${big.code}, not 1009`);

  s.child.kill('SIGTERM');
  const ends = await within(5000, 'close at the stop', Promise.all([cs[0].close, cs[1].close]));
  for (const e of ends)
    if (e.code !== 1001) fail(`${scheme}: the stop closed a socket with ${e.code} "${e.reason}", not 1001`);
  const code = await new Promise((r) => (s.child.exitCode !== null ? r(s.child.exitCode) : s.child.on('exit', r)));
  if (code !== 0) fail(`${scheme}: chat exited ${code}`);
  console.log(`ok: ${engine} ${scheme}: broadcast to 3, fragments, UTF-8, ping/pong, 1009 over the limit, 1001 at the stop`);
}

const certDir = mkdtempSync(path.join(tmpdir(), 'srv-chat-ws-'));
const cert = path.join(certDir, 'cert.pem'), key = path.join(certDir, 'key.pem');
execSync(`openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ${key} ` +
  `-out ${cert} -days 2 -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1`,
  { stdio: 'ignore' });
try {
  await run('ws');
  await run('wss', readFileSync(cert));
} catch (e) {
  fail(e.message);
} finally {
  rmSync(certDir, { recursive: true, force: true });
}
process.exit(0);
