// examples/chat started for a test (tests/browser/chat.mjs, chat-ws.mjs):
// resolves with its port, or with { refused } when the engine cannot serve
// WebSocket (chat says so at start). `children` keeps every instance, so
// the caller can kill what is left when it exits.
import { spawn } from 'node:child_process';

export function startChat(chatBin, engine, env, children) {
  return new Promise((resolve, reject) => {
    const child = spawn(chatBin, ['--engine', engine, '--host', '127.0.0.1', '--port', '0',
      '--max-message-bytes', '100'], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    children.add(child);
    child.on('exit', () => children.delete(child));
    const t = { child, out: '' };
    const seen = (d) => {
      t.out += d;
      const m = / engine on port (\d+)/.exec(t.out);
      if (m) resolve({ ...t, port: m[1] });
      if (/cannot serve WebSocket/.test(t.out)) resolve({ ...t, refused: t.out.trim() });
    };
    child.stdout.on('data', seen);
    child.stderr.on('data', seen);
    setTimeout(() => reject(new Error(`chat did not start within 10 s: ${t.out}`)), 10000);
  });
}
