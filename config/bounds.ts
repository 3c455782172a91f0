// Bounds shared by the config tree's keys (config/schema.ts) and the wire contract built from them
// (lib/contract.ts): zod only, since the workflow bundle imports the contract.
import { z } from 'zod';

export const positiveInt = z.number().int().positive();

/** Node's timers take a signed 32-bit count of milliseconds: a longer delay overflows and fires after
 *  1 ms, so a "no timeout" of 1e9 s would abort every request at once. Every duration key has this bound. */
export const MAX_TIMER_S = Math.floor((2 ** 31 - 1) / 1000);
/** A duration in seconds (timeouts, intervals, waits). */
export const seconds = () =>
  z.number().max(MAX_TIMER_S, {
    error: `at most ${MAX_TIMER_S} s (24.8 days): Node's timers count milliseconds in 32 bits and fire at once beyond that (for "no timeout", give a long one)`,
  });

// Bounds of the size keys: values that would exhaust memory (or a node) before doing anything useful.
/** Tokens in one sequence or micro-batch: beyond any model's context, and no accelerator holds its activations. */
export const MAX_TOKENS = 2 ** 24;
/** Prompts, samples or records of one step: a step holds them in memory and in its workflow history at once. */
export const MAX_BATCH = 65_536;
/** Rows of a synthetic dataset: each is drawn, rendered to an image and stored at load. */
export const MAX_SYNTHETIC_ROWS = 1_000_000;
/** sharp's own decoding limit (16383 × 16383): a larger image is refused by the decoder anyway. */
export const MAX_IMAGE_PIXELS = 0x3fff * 0x3fff;
/** An image's encoded bytes are held in memory whole, several images at a time. */
export const MAX_IMAGE_BYTES = 1024 ** 3;
/** Engines (each a process of its own) and GPUs of one node (a process each). */
export const MAX_ENGINES = 256;
export const MAX_GPUS = 64;

export const atMost = (max: number, why: string) => positiveInt.max(max, { error: `at most ${max}: ${why}` });
export const tokens = () =>
  atMost(
    MAX_TOKENS,
    "tokens of one sequence or micro-batch (2^24, beyond any model's context; its activations would not fit in memory)",
  );
export const batch = () =>
  atMost(MAX_BATCH, 'a step holds its prompts, samples or records in memory and in its workflow history at once');
