// NODE_OPTIONS="--require $PWD/my-exp/bind_localhost.js" nnictl create ...: NNI's web UI / REST server listens on $NNI_BIND_HOST
// (default 127.0.0.1) instead of all interfaces. lvbert search nnictl sets this up itself; `lvbert init-experiment my-exp`
// copies this file (shipped in nni_lvbert/experiments/) next to the nnictl configs.
const net = require('net');
const host = process.env.NNI_BIND_HOST || '127.0.0.1';
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === 'number' && (args.length === 1 || typeof args[1] === 'function')) {
    args.splice(1, 0, host);
  } else if (args[0] && typeof args[0] === 'object' && args[0].port !== undefined && !args[0].host) {
    args[0] = { ...args[0], host };
  }
  return listen.apply(this, args);
};
