// The todo page: lists, adds and deletes items through the JSON API, and
// shows items added anywhere as they come (server-sent events on /events).
// ?api=ORIGIN calls a todo service on another origin (CORS).
'use strict';
const api = new URLSearchParams(location.search).get('api') || '';
const $ = (id) => document.getElementById(id);

// One call to the API. Every answer but a 204 has a JSON body, errors
// too ({"status":413,"error":"Content Too Large","message":...}); a failed
// call throws an Error carrying that status and body.
async function call(method, path, body) {
  const init = { method };
  if (body !== undefined) {
    init.headers = { 'Content-Type': 'application/json' };
    init.body = typeof body === 'string' ? body : JSON.stringify(body);
  }
  const res = await fetch(api + path, init);
  const text = await res.text();
  const data = text ? JSON.parse(text) : null;
  if (!res.ok) {
    const err = new Error((data && (data.message || data.error)) || res.statusText);
    err.status = res.status;
    err.body = data;
    err.contentType = res.headers.get('Content-Type');
    throw err;
  }
  return { status: res.status, location: res.headers.get('Location'), data };
}

function status(text, isError) {
  $('status').textContent = text;
  $('status').className = isError ? 'error' : '';
}

function show(item) {
  if ($('todo-' + item.id)) return; // our own POST and its event both bring it
  const li = document.createElement('li');
  li.id = 'todo-' + item.id;
  const title = document.createElement('span');
  title.textContent = item.title;
  const del = document.createElement('button');
  del.textContent = 'Delete';
  del.onclick = () => remove(item.id).catch((e) => status(e.message, true));
  li.append(title, del);
  $('list').append(li);
}

async function load() {
  const { data } = await call('GET', '/todos');
  $('list').replaceChildren();
  data.forEach(show);
}

async function add(title) {
  const { data } = await call('POST', '/todos', { title });
  show(data);
  return data;
}

async function remove(id) {
  await call('DELETE', '/todos/' + id);
  $('todo-' + id)?.remove();
}

$('add').onsubmit = async (e) => {
  e.preventDefault();
  try {
    await add($('title').value);
    $('title').value = '';
    status('');
  } catch (err) {
    status(err.message, true);
  }
};

$('api').textContent = api || location.origin;
const received = []; // every item the event stream brought
const events = new EventSource(api + '/events');
events.onopen = () => { $('live').textContent = 'on'; };
events.onerror = () => { $('live').textContent = 'reconnecting'; };
events.addEventListener('todo', (e) => {
  const item = JSON.parse(e.data);
  received.push(item);
  show(item);
});
load().catch((err) => status(err.message, true));

// The same calls for the console and for tests/browser.
window.todo = { call, add, remove, load, events, received };
