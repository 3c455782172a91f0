// Starts S3Proxy (testing/s3-server.ts) for a test in another language (tests/python/test_blobstore_s3.py)
// and holds it until stdin closes or SIGTERM/SIGINT, then stops it and exits.
//   node --import tsx testing/s3-server-child.ts DATA_DIR [BUCKET...]
// Prints one JSON line on stdout: {"endpoint", "pid", "env": {AWS_*}, "version", "java", …} once up,
// or {"unavailable": reason} (exit 0) where the server cannot be installed or run here.
import { S3ServerUnavailable, startS3Server, type S3Server } from './s3-server.js';

const [dataDir, ...buckets] = process.argv.slice(2);
if (!dataDir) {
  process.stderr.write('usage: s3-server-child.ts DATA_DIR [BUCKET...]\n');
  process.exit(2);
}

let server: S3Server;
try {
  server = await startS3Server({ dataDir, buckets });
} catch (err) {
  if (!(err instanceof S3ServerUnavailable)) throw err;
  process.stdout.write(`${JSON.stringify({ unavailable: err.message })}\n`);
  process.exit(0);
}

let stopping = false;
const stop = async () => {
  if (stopping) return;
  stopping = true;
  await server.stop();
  process.exit(0);
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
process.stdin.on('end', stop);
process.stdin.on('close', stop);
process.stdin.resume();
process.stdout.write(
  `${JSON.stringify({
    endpoint: server.endpoint,
    pid: server.pid,
    env: server.awsEnv(),
    version: server.version,
    java: server.java,
    java_major: server.javaMajor,
    install: server.install,
    start_ms: server.startMs,
    log: server.log,
  })}\n`,
);
