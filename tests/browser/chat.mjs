// examples/chat in headless Chromium (puppeteer-core), on one engine: the
// browser's own WebSocket client against the core's, over http and https.
//   node tests/browser/chat.mjs BUILD_DIR ENGINE
// For each scheme: two pages open the room; a message typed in the first
// shows in both, a UTF-8 one sent by the second too; a message over --max-message-bytes closes the second
// page's socket with 1009; a stop (SIGTERM) closes the first's with 1001.
// Over https the page comes over HTTP/2 where the engine offers h2, and
// the WebSocket on its own HTTP/1.1 connection (no RFC 8441). An engine
// without SRV_CAP_WEBSOCKET must refuse /chat at start: reported, not run.
import { execSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { startChat as startChatIn } from './chat-server.mjs';

const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const [buildDir, engine] = process.argv.slice(2);
if (!buildDir || !engine) {
  console.error('usage: node tests/browser/chat.mjs BUILD_DIR ENGINE');
  process.exit(2);
}
const chatBin = path.join(buildDir, 'examples/chat/chat');
const fail = (msg) => { console.error(`FAIL: ${engine}: ${msg}`); process.exit(1); };
if (!existsSync(CHROMIUM))
  fail(`${CHROMIUM} not found: install Debian's chromium (scripts/install-deps.sh does)`);
let puppeteer;
try {
  puppeteer = (await import('puppeteer-core')).default;
} catch (e) {
  fail(`puppeteer-core is not installed: run 'npm ci' in tests/browser (scripts/install-deps.sh does): ${e.message}`);
}

const children = new Set();
process.on('exit', () => children.forEach((c) => c.kill('SIGKILL')));

const startChat = (env) => startChatIn(chatBin, engine, env, children);

const certDir = mkdtempSync(path.join(tmpdir(), 'srv-browser-chat-'));
const cert = path.join(certDir, 'cert.pem'), key = path.join(certDir, 'key.pem');
execSync(`openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ${key} ` +
  `-out ${cert} -days 2 -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1`,
  { stdio: 'ignore' });
const spki = execSync(`openssl x509 -in ${cert} -pubkey -noout | openssl pkey -pubin -outform der | ` +
  'openssl dgst -sha256 -binary | base64').toString().trim();
const browser = await puppeteer.launch({
  executablePath: CHROMIUM,
  headless: true,
  args: [`--ignore-certificate-errors-spki-list=${spki}`, '--disable-gpu', '--disable-dev-shm-usage',
    ...(process.getuid && process.getuid() === 0 ? ['--no-sandbox'] : [])],
});

// The page's log shows `text` within 5 s; else the error says what it shows.
async function logHas(page, text) {
  try {
    await page.waitForFunction((t) => document.getElementById('log').textContent.includes(t),
      { timeout: 5000, polling: 'mutation' }, text); // rAF polling stalls in a tab behind another
  } catch (e) {
    const shown = await page.evaluate(() => document.getElementById('log').innerText).catch(() => '?');
    throw new Error(`waited 5 s for "${text}" in ${page.url()}; the log shows: ${JSON.stringify(shown)}`);
  }
}

async function run(scheme) {
  const env = scheme === 'https' ? { SRV_TLS_CERT_FILE: cert, SRV_TLS_KEY_FILE: key } : {};
  const c = await startChat(env);
  if (c.refused) {
    console.log(`ok: ${engine}: no SRV_CAP_WEBSOCKET, /chat refused at start: ${c.refused.split('\n')[0]}`);
    return false;
  }
  const url = `${scheme}://127.0.0.1:${c.port}/`;
  const [p1, p2] = [await browser.newPage(), await browser.newPage()];
  for (const p of [p1, p2]) {
    const r = await p.goto(url);
    if (r.status() !== 200) fail(`${url}: ${r.status()}`);
    await logHas(p, 'connected');
  }
  const proto = await p1.evaluate(() => performance.getEntriesByType('navigation')[0].nextHopProtocol);
  // The 101 is out before the server runs on_open (the room's join): p2's own message coming
  // back proves p2 joined before p1 speaks (p1's own echo proves the same for p1 below).
  await p2.evaluate('ws.send("p2 is here")');
  await logHas(p2, 'p2 is here');
  await p1.bringToFront(); // input goes to the tab in front
  await p1.type('#text', 'hello from Chromium');
  await p1.click('#send');
  await logHas(p1, 'hello from Chromium');
  await logHas(p2, 'hello from Chromium');
  await p2.evaluate('ws.send("olá, ünïcode ✓")'); // UTF-8 of 2 and 3 bytes
  await logHas(p1, 'olá, ünïcode ✓');
  await logHas(p2, 'olá, ünïcode ✓');
  await p2.evaluate('ws.send("x".repeat(101))');
  await logHas(p2, 'closed (1009');
  c.child.kill('SIGTERM');
  await logHas(p1, 'closed (1001 server stopping)');
  const code = await new Promise((r) => (c.child.exitCode !== null ? r(c.child.exitCode) : c.child.on('exit', r)));
  if (code !== 0) fail(`${scheme}: chat exited ${code}`);
  await p1.close();
  await p2.close();
  console.log(`ok: ${engine} ${scheme} (page over ${proto}): broadcast to both pages, 1009 over the limit, 1001 at the stop`);
  return true;
}

try {
  if (await run('http'))
    await run('https');
} catch (e) {
  fail(e.message.split('\n')[0]);
} finally {
  await browser.close();
  rmSync(certDir, { recursive: true, force: true });
}
