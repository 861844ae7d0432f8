'use strict';
/*
 * Drives the unmodified eureka-js-client (npm 4.5.0) against a Eureka server and reports, as one JSON
 * object per line on stdout, everything it observes: the client's events, the requests it makes, its
 * log lines, and on demand its discovery caches. tests/interop/test_eureka_js_client.py reads it.
 *
 * Usage: node driver.js --url http://127.0.0.1:8761/eureka/v2/ [--app jsapp] [--host-name h]
 *          [--port 8080] [--vip jsapp.vip] [--instance-id id] [--delta] [--upstream-shape]
 *          [--heartbeat-ms 1000] [--fetch-ms 1000] [--auth user:password]
 *          [--ca ca.pem] [--cert client.pem --key client.key]
 * The URL may also come from EUREKA_URL. "apps/" is appended unless the URL already ends with it.
 * Credentials for a server with API accounts go in the URL (http://user:password@host:port/eureka/v2/),
 * or with --auth into each request's options from the requestMiddleware, as the client's README shows.
 * Over HTTPS, --ca (the CA bundle that verifies the server) and --cert / --key (a client certificate
 * and its key, PEM) go into each request's options from the requestMiddleware too: the `request`
 * library hands ca, cert and key to Node's TLS (the client has no TLS settings of its own).
 *
 * Commands, one JSON object per line on stdin:
 *   {"cmd": "state", "id": 1, "apps": ["JSAPP"], "vips": ["jsapp.vip"]}  -> {"event": "state", "id": 1, ...}
 *   {"cmd": "stop", "id": 2}   -> client.stop(); {"event": "stopped", "id": 2, "error": null | "..."}
 *   {"cmd": "exit"}            -> exits (also on end of stdin, after stopping a running client)
 */

const fs = require('fs');
const readline = require('readline');
const { Eureka } = require('eureka-js-client');

function emit(event, fields) {
  process.stdout.write(`${JSON.stringify({ event, t: Date.now(), ...fields })}\n`);
}

function describe(value) {
  if (value instanceof Error) return `${value.name}: ${value.message}`;
  if (typeof value === 'string') return value;
  try {
    return JSON.stringify(value);
  } catch (err) {
    return String(value);
  }
}

function parseArgs(argv) {
  const options = {};
  for (let i = 0; i < argv.length; i += 1) {
    const arg = argv[i];
    if (!arg.startsWith('--')) throw new Error(`unexpected argument ${arg}`);
    const key = arg.slice(2);
    if (key === 'delta' || key === 'upstream-shape') {
      options[key] = true;
    } else {
      if (i + 1 >= argv.length) throw new Error(`missing value for ${arg}`);
      options[key] = argv[i + 1];
      i += 1;
    }
  }
  return options;
}

function serviceUrl(url) {
  if (!url) throw new Error('no server URL: pass --url or set EUREKA_URL');
  const withSlash = url.endsWith('/') ? url : `${url}/`;
  return withSlash.endsWith('/apps/') ? withSlash : `${withSlash}apps/`;
}

// The fields a test needs to identify an instance in the client's caches.
function summary(instance) {
  return {
    app: instance.app,
    instanceId: instance.instanceId,
    hostName: instance.hostName,
    port: instance.port && typeof instance.port === 'object' ? instance.port.$ : instance.port,
    status: instance.status,
    vipAddress: instance.vipAddress,
    actionType: instance.actionType,
  };
}

function main() {
  const options = parseArgs(process.argv.slice(2));
  const app = options.app || 'jsapp';
  const port = Number(options.port || 8080);
  // The README's shape (port object with @enabled as a JSON bool, dataCenterInfo with @class), or with
  // --upstream-shape the one of the client's own integration test (bare port number, no @class).
  const upstream = Boolean(options['upstream-shape']);
  const instance = {
    app,
    hostName: options['host-name'] || 'localhost',
    ipAddr: '127.0.0.1',
    port: upstream ? port : { $: port, '@enabled': true },
    vipAddress: options.vip || `${app}.vip`,
    dataCenterInfo: upstream
      ? { name: 'MyOwn' }
      : { '@class': 'com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo', name: 'MyOwn' },
  };
  if (options['instance-id']) instance.instanceId = options['instance-id'];

  let auth = null;
  if (options.auth) {
    const colon = options.auth.indexOf(':');
    auth = { user: options.auth.slice(0, colon), password: options.auth.slice(colon + 1) };
  }

  // PEM files for HTTPS, read once: request takes them as ca / cert / key options.
  const tls = {};
  ['ca', 'cert', 'key'].forEach((name) => {
    if (options[name]) tls[name] = fs.readFileSync(options[name]);
  });

  const logger = {};
  ['error', 'warn', 'info', 'debug'].forEach((level) => {
    logger[level] = (...args) => emit('log', { level, msg: args.map(describe).join(' ') });
  });
  logger.level = () => 20;

  const client = new Eureka({
    logger,
    shouldUseDelta: Boolean(options.delta),
    requestMiddleware: (requestOpts, done) => {
      emit('request', { method: (requestOpts.method || 'GET').toUpperCase(), uri: requestOpts.uri });
      if (auth) {
        requestOpts.auth = auth;
      }
      Object.assign(requestOpts, tls);
      done(requestOpts);
    },
    instance,
    eureka: {
      serviceUrls: { default: [serviceUrl(options.url || process.env.EUREKA_URL)] },
      heartbeatInterval: Number(options['heartbeat-ms'] || 1000),
      registryFetchInterval: Number(options['fetch-ms'] || 1000),
    },
  });
  ['started', 'registered', 'deregistered', 'heartbeat', 'registryUpdated'].forEach((name) => {
    client.on(name, () => emit(name, { hasFullRegistry: client.hasFullRegistry }));
  });

  let running = false;
  let exiting = false;

  function exit(code) {
    if (exiting) return;
    exiting = true;
    emit('exit', { code });
    // Let stdout drain before the process goes.
    process.stdout.write('', () => process.exit(code));
  }

  function stop(id, then) {
    if (!running) {
      emit('stopped', { id, error: 'not running' });
      if (then) then();
      return;
    }
    running = false;
    client.stop((err) => {
      emit('stopped', { id, error: err ? describe(err) : null });
      if (then) then();
    });
  }

  const commands = {
    state(cmd) {
      const apps = {};
      (cmd.apps || []).forEach((name) => {
        apps[name] = client.getInstancesByAppId(name).map(summary);
      });
      const vips = {};
      (cmd.vips || []).forEach((name) => {
        vips[name] = client.getInstancesByVipAddress(name).map(summary);
      });
      emit('state', { id: cmd.id, apps, vips, hasFullRegistry: client.hasFullRegistry, instanceId: client.instanceId });
    },
    stop(cmd) {
      stop(cmd.id);
    },
    exit() {
      exit(0);
    },
  };

  const input = readline.createInterface({ input: process.stdin });
  input.on('line', (line) => {
    if (!line.trim()) return;
    let cmd;
    try {
      cmd = JSON.parse(line);
    } catch (err) {
      emit('error', { msg: `bad command ${line}: ${describe(err)}` });
      return;
    }
    const handler = commands[cmd.cmd];
    if (!handler) {
      emit('error', { id: cmd.id, msg: `unknown command ${cmd.cmd}` });
      return;
    }
    handler(cmd);
  });
  input.on('close', () => stop(null, () => exit(0)));

  running = true;
  emit('starting', { serviceUrl: client.clusterResolver.serviceUrls[0], instanceId: client.instanceId, instance });
  client.start((err) => emit('start-callback', { error: err ? describe(err) : null }));
}

try {
  main();
} catch (err) {
  emit('fatal', { msg: describe(err) });
  process.exit(2);
}
