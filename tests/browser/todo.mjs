// examples/todo in headless Chromium, driven by puppeteer-core: the page
// and the API as a person's browser uses them, on one engine.
//   node tests/browser/todo.mjs BUILD_DIR ENGINE [--known-failures]
// For each scheme the engine serves - http (HTTP/1.1); https when it has
// SRV_CAP_TLS (todo refuses TLS otherwise), over HTTP/2 where it offers h2
// by ALPN (todo's start line says so) - it starts two todo instances, A
// and B, on 127.0.0.1 (two ports: two origins), and checks:
//   - A's page loads, its EventSource opens, an item added through the
//     form shows and its SSE event arrives, Delete removes it (404 after);
//   - the library's own errors are JSON: unknown route 404, 405, and 413
//     for a 70 KiB body on a route that buffers bodies;
//   - A's page with ?api=B (cross-origin): the list, the events, an item
//     added through the form (a preflight, seen in B's access log), the
//     Location header readable, a malformed body's JSON 400, and todo's
//     JSON 413 for a 70 KiB POST /todos readable by the page (CORS), whose
//     form then shows its message;
//   - a screenshot of that page: BUILD_DIR/meson-logs/browser/todo-ENGINE-SCHEME.png.
// HTTPS uses a self-signed certificate made here with the openssl CLI, as
// the conformance suite makes its own, trusted by its public key hash
// (--ignore-certificate-errors-spki-list), not by ignoring every error.
// KNOWN lists the cases that fail for a reason filed elsewhere: they run
// and are reported as KNOWN FAILURE, without failing this run; with
// --known-failures only those run and the exit status is theirs (meson
// registers that run should_fail: an unexpected pass says the bug is fixed).
import { spawn, execSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const KNOWN = [
];

const [buildDir, engine, flag] = process.argv.slice(2);
if (!buildDir || !engine) {
  console.error('usage: node tests/browser/todo.mjs BUILD_DIR ENGINE [--known-failures]');
  process.exit(2);
}
const onlyKnown = flag === '--known-failures';
const todoBin = path.join(buildDir, 'examples/todo/todo');
const shotDir = path.join(buildDir, 'meson-logs/browser');
const fail = (msg) => { console.error(`FAIL: ${msg}`); process.exit(1); };
if (!existsSync(CHROMIUM))
  fail(`${CHROMIUM} not found: install Debian's chromium (scripts/install-deps.sh does)`);
if (!existsSync(todoBin))
  fail(`${todoBin} not found: examples/todo is built only with jansson (apt install libjansson-dev)`);
let puppeteer;
try {
  puppeteer = (await import('puppeteer-core')).default;
} catch (e) {
  fail(`puppeteer-core is not installed: run 'npm ci' in tests/browser (scripts/install-deps.sh does): ${e.message}`);
}
mkdirSync(shotDir, { recursive: true });

const results = []; // { name, status: 'ok' | 'FAIL' | 'KNOWN FAILURE', detail }
function record(ctx, name, ok, detail) {
  const known = KNOWN.find((k) => k.engine === engine && k.protocol === ctx.protocol && k.check === name);
  const status = ok ? 'ok' : known ? 'KNOWN FAILURE' : 'FAIL';
  const line = `${status}: ${engine} ${ctx.scheme} (${ctx.protocol}): ${name}` +
    (ok ? '' : `: ${detail}${known ? ` [${known.why}]` : ''}`);
  console.log(line);
  results.push({ name, status, known: !!known });
}
// One check: fn returns nothing or throws; its error is the detail.
async function check(ctx, name, fn) {
  const known = KNOWN.some((k) => k.engine === engine && k.protocol === ctx.protocol && k.check === name);
  if (onlyKnown && !known) return;
  try {
    await fn();
    record(ctx, name, true);
  } catch (e) {
    record(ctx, name, false, e.message.split('\n')[0]);
  }
}
const expect = (cond, msg) => { if (!cond) throw new Error(msg); };

// Every todo started, killed if this run ends early (a failure, meson's
// timeout) so that none outlives it.
const children = new Set();
process.on('exit', () => children.forEach((c) => c.kill('SIGKILL')));
for (const sig of ['SIGINT', 'SIGTERM'])
  process.on(sig, () => { console.error(`FAIL: stopped by ${sig}`); process.exit(1); });

// A todo instance: resolves with its origin and start line; its stderr
// (the access log) is kept.
function startTodo(args) {
  return new Promise((resolve, reject) => {
    const child = spawn(todoBin, ['--engine', engine, '--host', '127.0.0.1', '--port', '0', ...args],
      { env: { ...process.env, SRV_ACCESS_LOG: 'common' }, stdio: ['ignore', 'pipe', 'pipe'] });
    children.add(child);
    child.on('exit', () => children.delete(child));
    const t = { child, log: '', line: '' };
    child.stderr.on('data', (d) => { t.log += d; });
    child.stdout.on('data', (d) => {
      t.line += d;
      const m = /listening on (\S+):(\d+) \(([^)]*)\)/.exec(t.line);
      if (m) {
        t.origin = `${m[1]}:${m[2]}`.replace('0.0.0.0', '127.0.0.1');
        t.h2 = m[3].includes('HTTP/2');
        resolve(t);
      }
    });
    child.on('exit', (code) => reject(Object.assign(new Error(`todo exited ${code}: ${t.log.trim()}`), { log: t.log })));
    setTimeout(() => reject(new Error('todo did not start within 10 s')), 10000);
  });
}
function stopTodo(t) {
  return new Promise((resolve) => {
    if (t.child.exitCode !== null) return resolve(t.child.exitCode);
    t.child.on('exit', (code) => resolve(code));
    t.child.kill('SIGTERM');
  });
}

// The certificate and the base64 SHA-256 of its public key, for Chromium.
const certDir = mkdtempSync(path.join(tmpdir(), 'srv-browser-tls-'));
const cert = path.join(certDir, 'cert.pem'), key = path.join(certDir, 'key.pem');
execSync(`openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ${key} ` +
  `-out ${cert} -days 2 -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1`,
  { stdio: 'ignore' });
const spki = execSync(`openssl x509 -in ${cert} -pubkey -noout | openssl pkey -pubin -outform der | ` +
  'openssl dgst -sha256 -binary | base64').toString().trim();

const browser = await puppeteer.launch({
  executablePath: CHROMIUM,
  headless: true,
  args: [`--ignore-certificate-errors-spki-list=${spki}`, '--disable-gpu', '--disable-dev-shm-usage',
    ...(process.getuid && process.getuid() === 0 ? ['--no-sandbox'] : [])], // root: no sandbox
});

const big = 'x'.repeat(70 * 1024); // over todo's 64 KiB

async function runScheme(scheme) {
  const tls = scheme === 'https' ? ['--tls-cert', cert, '--tls-key', key] : [];
  let a, b;
  try {
    a = await startTodo(tls);
  } catch (e) {
    if (tls.length && /does not serve TLS/.test(e.message)) {
      console.log(`skip: ${engine} https: the engine has no SRV_CAP_TLS (${e.message.split('\n')[0]})`);
      return;
    }
    throw e;
  }
  b = await startTodo(tls);
  const ctx = { scheme, protocol: scheme === 'https' && a.h2 ? 'h2' : 'http/1.1' };
  const context = await browser.createBrowserContext();
  try {
    const page = await context.newPage();
    page.setDefaultTimeout(10000);
    await page.goto(a.origin + '/', { waitUntil: 'load' });
    await check(ctx, 'page and events', async () => {
      await page.waitForFunction(() => document.getElementById('live').textContent === 'on');
      const proto = await page.evaluate(() => performance.getEntriesByType('navigation')[0].nextHopProtocol);
      expect(proto === ctx.protocol, `the page came over ${proto}, expected ${ctx.protocol}`);
    });
    await check(ctx, 'add through the form, its SSE event, delete', async () => {
      const title = `milk ${engine} ${scheme}`;
      await page.type('#title', title);
      await page.click('button[type=submit]');
      await page.waitForFunction((t) => [...document.querySelectorAll('#list li span')].some((s) => s.textContent === t), {}, title);
      const item = await page.waitForFunction((t) => window.todo.received.find((i) => i.title === t), {}, title)
        .then((h) => h.jsonValue());
      await page.click(`#todo-${item.id} button`);
      await page.waitForFunction((id) => !document.getElementById('todo-' + id), {}, item.id);
      const gone = await page.evaluate((id) => window.todo.call('GET', '/todos/' + id)
        .then(() => 0, (e) => e.status), item.id);
      expect(gone === 404, `GET /todos/${item.id} after Delete: ${gone}, expected 404`);
    });
    // Errors the library answers itself: JSON with the error_format shape.
    const libError = (method, p, body) => page.evaluate(async (method, p, body) => {
      try {
        const r = await fetch(p, { method, body });
        return { status: r.status, type: r.headers.get('Content-Type'), body: await r.text() };
      } catch (e) {
        return { error: String(e) };
      }
    }, method, p, body);
    const jsonError = (r, status) => {
      expect(!r.error, `the fetch failed: ${r.error}`);
      expect(r.status === status, `status ${r.status}, expected ${status} (${r.body})`);
      expect(r.type === 'application/json', `Content-Type ${r.type}`);
      const j = JSON.parse(r.body);
      expect(j.status === status && j.error && j.path && j.timestamp, `body ${r.body}`);
    };
    await check(ctx, 'library 404 and 405 as JSON', async () => {
      jsonError(await libError('GET', '/no/such/route'), 404);
      jsonError(await libError('PUT', '/todos'), 405);
    });
    await check(ctx, 'library 413', async () => {
      jsonError(await libError('POST', '/todos/1', big), 413);
    });

    // Cross-origin: A's page calls B's API.
    const cross = await context.newPage();
    cross.setDefaultTimeout(10000);
    await cross.goto(`${a.origin}/?api=${encodeURIComponent(b.origin)}`, { waitUntil: 'load' });
    await check(ctx, 'cross-origin: events, add with a preflight, Location readable', async () => {
      await cross.waitForFunction(() => document.getElementById('live').textContent === 'on');
      const title = `bread ${engine} ${scheme}`;
      await cross.type('#title', title);
      await cross.click('button[type=submit]');
      await cross.waitForFunction((t) => window.todo.received.some((i) => i.title === t), {}, title);
      expect(/"OPTIONS \/todos HTTP\/[12.]+" 204/.test(b.log), `no preflight in B's access log:\n${b.log}`);
      const r = await cross.evaluate(() => window.todo.call('POST', '/todos', { title: 'eggs' }));
      expect(r.status === 201 && r.location === `/todos/${r.data.id}` && r.data.title === 'eggs',
        `POST answered ${JSON.stringify(r)}`);
      const list = await cross.evaluate(() => window.todo.load().then(() => document.querySelectorAll('#list li').length));
      expect(list === 2, `${list} items listed, expected 2`);
    });
    const appError = (body) => cross.evaluate((body) => window.todo.call('POST', '/todos', body)
      .then((r) => ({ status: r.status }), (e) => ({ status: e.status, type: e.contentType, body: e.body, error: e.status ? undefined : String(e) })), body);
    await check(ctx, 'cross-origin: malformed JSON is a readable JSON 400', async () => {
      const r = await appError('{"title": ');
      expect(r.status === 400 && r.type === 'application/json' && r.body.status === 400 && /malformed/.test(r.body.message),
        `got ${JSON.stringify(r)}`);
    });
    await check(ctx, 'cross-origin: a 70 KiB body is a readable JSON 413', async () => {
      const r = await appError(JSON.stringify({ title: big }));
      expect(!r.error, `the page could not read the answer: ${r.error}`);
      expect(r.status === 413 && r.type === 'application/json' && r.body.status === 413 && r.body.error && r.body.path === '/todos',
        `got ${JSON.stringify(r)}`);
      // The same through the form: the page shows the 413's message (and
      // the screenshot below shows it).
      await cross.$eval('#title', (el, v) => { el.value = v; }, big);
      await cross.click('button[type=submit]');
      const shown = await cross.waitForFunction(() => document.getElementById('status').textContent)
        .then((h) => h.jsonValue());
      expect(shown === r.body.message, `the page shows "${shown}", expected "${r.body.message}"`);
    });
    if (!onlyKnown) {
      const shot = path.join(shotDir, `todo-${engine}-${scheme}.png`);
      await cross.screenshot({ path: shot, fullPage: true });
      console.log(`screenshot: ${shot}`);
    }
  } finally {
    await context.close();
    const codes = [await stopTodo(a), await stopTodo(b)];
    if (!onlyKnown)
      record(ctx, 'both instances stop with status 0', codes.every((c) => c === 0), `exit statuses ${codes}`);
  }
}

const t0 = Date.now();
try {
  for (const scheme of ['http', 'https'])
    await runScheme(scheme);
} finally {
  await browser.close();
  rmSync(certDir, { recursive: true, force: true });
}
const failed = results.filter((r) => r.status === 'FAIL');
const known = results.filter((r) => r.status === 'KNOWN FAILURE');
const passed = results.filter((r) => r.status === 'ok');
console.log(`\n${engine}: ${passed.length} passed, ${failed.length} failed, ${known.length} known failures ` +
  `(${((Date.now() - t0) / 1000).toFixed(1)} s)`);
if (onlyKnown) {
  // Every known case of this engine must have run and failed for this to "fail as expected".
  process.exit(known.length > 0 && passed.length === 0 && failed.length === 0 ? 1 : 0);
}
process.exit(failed.length > 0 ? 1 : 0);
