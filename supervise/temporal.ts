// Connections to the Temporal server from the config (embedded dev server or any cluster/Cloud).
import { Client, Connection, type ConnectionOptions } from '@temporalio/client';
import type { NativeConnection } from '@temporalio/worker';
import { type TempoConfig, tlsInUse } from '../config/schema.js';
import { CONFIG_FILE, readBoundedBytes } from '../base/bounded-file.js';

export function temporalAddress(cfg: TempoConfig): string {
  return cfg.temporal.address || `${cfg.server.ip}:${cfg.server.port}`;
}

export function usesEmbeddedServer(cfg: TempoConfig): boolean {
  return !cfg.temporal.address;
}

/** PEM bytes given inline or by path (the schema refuses both), or undefined; a path is read as a
 *  config-like file (a regular file of bounded size: never a FIFO or /dev/zero). */
function pem(data: string, file: string): Buffer | undefined {
  if (data) return Buffer.from(data, 'utf8');
  return file ? readBoundedBytes(file, CONFIG_FILE) : undefined;
}

function connectionOptions(cfg: TempoConfig): ConnectionOptions & { apiKey?: string } {
  const { tls, api_key } = cfg.temporal;
  const opts: ConnectionOptions & { apiKey?: string } = { address: temporalAddress(cfg) };
  const crt = pem(tls.client_cert_data, tls.client_cert_path);
  const key = pem(tls.client_key_data, tls.client_key_path);
  if (tlsInUse(cfg.temporal)) {
    opts.tls = {
      serverNameOverride: tls.server_name || undefined,
      serverRootCACertificate: pem(tls.server_ca_cert_data, tls.server_ca_cert_path),
      clientCertPair: crt && key ? { crt, key } : undefined,
    };
  }
  if (api_key) opts.apiKey = api_key;
  return opts;
}

export async function connectClient(cfg: TempoConfig): Promise<Client> {
  const connection = await Connection.connect(connectionOptions(cfg));
  return new Client({ connection, namespace: cfg.temporal.namespace });
}

/**
 * A client that connects on its first call and reconnects quickly: for a reader that must live
 * through the server going down and coming back (tempo-rl ui). gRPC's reconnect backoff grows to
 * two minutes by default, so a restarted server would be noticed a minute late; here within a second.
 */
export function lazyClient(cfg: TempoConfig): Client {
  const connection = Connection.lazy({
    ...connectionOptions(cfg),
    channelArgs: { 'grpc.initial_reconnect_backoff_ms': 250, 'grpc.max_reconnect_backoff_ms': 1000 },
  });
  return new Client({ connection, namespace: cfg.temporal.namespace });
}

/** The worker side's connection; @temporalio/worker (its native core) loads only in a worker process. */
export async function connectWorker(cfg: TempoConfig): Promise<NativeConnection> {
  const { NativeConnection } = await import('@temporalio/worker');
  return NativeConnection.connect(connectionOptions(cfg));
}
