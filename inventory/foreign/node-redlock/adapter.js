#!/usr/bin/env node
// The node-redlock adapter of redlab's foreign lock client protocol
// (../README.md): npm redlock 4.2.0 over node redis 3.1.2, set up as
// redlock's README shows them, with every option of redlock at its default.
//
//   --release-with-del  release with a plain DEL of the key on every node
//                       instead of lock.unlock(): the mistake, for the
//                       node-redlock-del comparison guard.
'use strict';

const fs = require('fs');
const readline = require('readline');
const redis = require('redis');
const Redlock = require('redlock');

const releaseWithDel = process.argv.slice(2).includes('--release-with-del');
const env = process.env;

// REDLAB_NODES: host:port,… or rediss://host:port,… (TLS).
const nodes = (env.REDLAB_NODES || '').split(',').filter(Boolean).map((s) => {
	const m = /^(rediss:\/\/)?\[?([^\]]+?)\]?:(\d+)$/.exec(s.trim());
	if (!m) fail(`REDLAB_NODES: ${JSON.stringify(s)} is not host:port or rediss://host:port`);
	return { tls: !!m[1], host: m[2], port: Number(m[3]) };
});
if (nodes.length === 0) fail('REDLAB_NODES is empty');

function tlsOptions(node) {
	if (!node.tls) return undefined;
	const read = (name) => (env[name] ? fs.readFileSync(env[name]) : undefined);
	// Without a server name the certificate is checked against the host.
	return { ca: read('REDLAB_TLS_CA'), cert: read('REDLAB_TLS_CERT'), key: read('REDLAB_TLS_KEY'),
		servername: env.REDLAB_TLS_SERVER_NAME || undefined };
}

// One client per independent node, as the README's Configuration does.
const clients = nodes.map((n) => {
	const c = redis.createClient(n.port, n.host, {
		user: env.REDLAB_USERNAME || undefined, password: env.REDLAB_PASSWORD || undefined, tls: tlsOptions(n),
		// The ready check sends INFO, which a lock client's least-privilege
		// login may not run; refused, the client never becomes ready.
		no_ready_check: true,
	});
	// node redis throws an 'error' nobody listens to, which would end the
	// adapter at a node's first refused connection.
	c.on('error', (err) => console.error(`node ${n.host}:${n.port}: ${err.message}`));
	return c;
});
const redlock = new Redlock(clients);
redlock.on('clientError', (err) => console.error('A redis error has occurred:', err.message));

// The locks granted and not yet released, by token.
const held = new Map();
const quorum = Math.floor(clients.length / 2) + 1;

// classify resolves to a failure's class. node-redlock's LockError does not
// say whether the key was held elsewhere or the nodes failed, so the
// adapter asks every node for the key (GET, 500 ms at most): a quorum
// answering makes it contended, fewer unavailable.
function classify(err, key) {
	if (!(err instanceof Redlock.LockError)) return Promise.resolve('other');
	const probes = clients.map((c) => new Promise((resolve) => {
		const timer = setTimeout(() => resolve(false), 500);
		c.get(key, (e) => { clearTimeout(timer); resolve(!e); });
	}));
	return Promise.all(probes).then((ok) => (ok.filter(Boolean).length >= quorum ? 'contended' : 'unavailable'));
}

function answer(a) { process.stdout.write(JSON.stringify(a) + '\n'); }

function granted(id, lock, received) {
	held.set(lock.value, lock);
	answer({ id, ok: true, token: lock.value, validity_ms: lock.expiration - received, attempts: lock.attempts });
}

function failed(id, key, err) {
	return classify(err, key).then((error) => answer({ id, ok: false, error, message: err.message, attempts: err.attempts }));
}

let inFlight = 0;
const track = (p) => { inFlight++; p.finally(() => { inFlight--; }); };

function handle(req, received) {
	const { id, op, key, token } = req;
	const lock = held.get(token);
	switch (op) {
	case 'acquire':
		return track(redlock.lock(key, req.ttl_ms).then((l) => granted(id, l, received), (err) => failed(id, key, err)));
	case 'extend':
		if (!lock) return answer({ id, ok: false, error: 'contended', message: `no lock with token ${token} is held` });
		return track(lock.extend(req.ttl_ms).then((l) => granted(id, l, received), (err) => failed(id, key, err)));
	case 'release': {
		if (!lock) return answer({ id, ok: false, error: 'contended', message: `no lock with token ${token} is held` });
		held.delete(token);
		const done = releaseWithDel
			? Promise.all(clients.map((c) => new Promise((resolve) => c.del(key, resolve))))
			: lock.unlock();
		return track(done.then(() => answer({ id, ok: true }), (err) => failed(id, key, err)));
	}
	default:
		return answer({ id, ok: false, error: 'other', message: `unknown op ${JSON.stringify(op)}` });
	}
}

function fail(msg) {
	console.error(`node-redlock adapter: ${msg}`);
	process.exit(2);
}

// The hello goes out once every client is ready, or after 5 s with the
// ones that are not named on stderr: requests to those wait in node
// redis's offline queue.
const ready = clients.map((c) => new Promise((resolve) => (c.ready ? resolve() : c.once('ready', resolve))));
const patience = new Promise((resolve) => setTimeout(resolve, 5000).unref());
Promise.race([Promise.all(ready), patience]).then(() => {
	clients.forEach((c, i) => c.ready || console.error(`node ${nodes[i].host}:${nodes[i].port}: not ready yet`));
	const versions = `redlock ${require('redlock/package.json').version}, redis ${require('redis/package.json').version}`;
	answer({ protocol: 1, client: `node-redlock (${versions})${releaseWithDel ? ', releasing with DEL' : ''}` });
	const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
	lines.on('line', (line) => {
		const received = Date.now();
		let req;
		try {
			req = JSON.parse(line);
		} catch (err) {
			fail(`not a JSON request: ${err.message}: ${line.slice(0, 200)}`);
		}
		handle(req, received);
	});
	// End of input: let what is in flight finish (at most 3 s), then quit
	// the clients (at most 1 s: a node that is down never answers QUIT).
	lines.on('close', () => {
		const deadline = Date.now() + 3000;
		const exit = () => process.exit(0);
		const wait = () => {
			if (inFlight > 0 && Date.now() < deadline) return setTimeout(wait, 10);
			setTimeout(exit, 1000);
			redlock.quit().then(exit, exit);
		};
		wait();
	});
});
