// What every part of the UI server reads from: the config (its state dir), the Temporal server's
// look-ups (bounded in time: while no server answers, the pages show what the step records and
// samples hold), the blob store, the token decoders and the Temporal UI's address for history links.
import type { TempoConfig } from '../config/schema.js';
import type { BlobStore } from '../stores/blobstore.js';
import type { TemporalGate } from './temporal-gate.js';
import type { TokenDecoder } from './tokens.js';

export interface UiContext {
  cfg: TempoConfig;
  /** The Temporal server's look-ups (ui/temporal-gate.ts). */
  temporal: TemporalGate;
  store: BlobStore;
  /** The decoder of a model directory's tokenizer (null: the configured model's). */
  decoder: (modelDir: string | null) => TokenDecoder;
  /** The Temporal UI (http://host:port), or null where there is none to link to. */
  temporalUi: string | null;
}

/** Where the UI listens: the page warns every visitor when it is beyond loopback (`remote`). */
export interface Served {
  host: string;
  remote: boolean;
}

/** A request the UI refuses or cannot answer: its HTTP status and a message naming the thing. */
export class UiError extends Error {
  constructor(
    readonly status: 400 | 403 | 404 | 405,
    message: string,
  ) {
    super(message);
  }
}

/** A link to a workflow's history in the Temporal UI, or null. */
export function historyUrl(ctx: UiContext, workflowId: string): string | null {
  if (!ctx.temporalUi) return null;
  return `${ctx.temporalUi}/namespaces/${encodeURIComponent(ctx.cfg.temporal.namespace)}/workflows/${encodeURIComponent(workflowId)}`;
}
