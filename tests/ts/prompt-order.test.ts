// rollout.prompt_order stratified: each epoch deals every stratum's rows in turn (a permutation,
// seeded like the shuffle), the angle-facts rows declare their figure kind as their stratum, and a
// dataset without strata is refused at config time, naming the key and the dataset. GRPO only: SFT's
// records keep the shuffle.
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { loadConfig } from '../../config/load.js';
import { DatasetConfig } from '../../config/schema.js';
import { ANGLE_ANSWERS } from '../../lib/data/synth-angles.js';
import { loadDataset, syntheticProblems } from '../../lib/data/index.js';
import { epochPermutation, selectPrompts, stratifiedPermutation, type DataCursor } from '../../lib/prompt-order.js';
import { initialRunState } from '../../config/run-plan.js';
import { REPO_ROOT } from '../../base/paths.js';
import { LocalBlobStore } from '../../stores/blobstore.js';

const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);
const range = (n: number) => Array.from({ length: n }, (_, i) => i);
/** `n` rows in `k` strata of equal size, the strata interleaved as a generator would leave them. */
const equalStrata = (n: number, k: number) => range(n).map((i) => (i * 7) % k);

test('the stratified order is a permutation, deterministic per (seed, epoch)', () => {
  for (const strata of [equalStrata(60, 6), [0, 0, 0, 1, 2, 2, 5, 5, 5, 5, 5, 1, 3], [4], [2, 2, 2]]) {
    const p = stratifiedPermutation(strata, 7, 0);
    assert.deepEqual(sorted(p), range(strata.length));
    assert.deepEqual(stratifiedPermutation(strata, 7, 0), p);
  }
  const strata = equalStrata(60, 6);
  const p = stratifiedPermutation(strata, 7, 0);
  assert.notDeepEqual(stratifiedPermutation(strata, 7, 1), p);
  assert.notDeepEqual(stratifiedPermutation(strata, 8, 0), p);
});

test('with equal strata every round of n_strata consecutive picks holds each stratum once', () => {
  for (const k of [2, 3, 6]) {
    const strata = equalStrata(k * 10, k);
    for (const epoch of [0, 1, 5]) {
      const p = stratifiedPermutation(strata, 3, epoch);
      for (let r = 0; r < p.length; r += k)
        assert.deepEqual(
          sorted(p.slice(r, r + k).map((i) => strata[i]!)),
          range(k),
          `k ${k} epoch ${epoch} round ${r / k}`,
        );
    }
  }
  // Unequal strata: a stratum that has run out sits the later rounds out; the others go on dealing.
  const strata = [0, 0, 0, 0, 1, 1, 2];
  const p = stratifiedPermutation(strata, 1, 0);
  assert.deepEqual(sorted(p.slice(0, 3).map((i) => strata[i]!)), [0, 1, 2]);
  assert.deepEqual(sorted(p.slice(3, 5).map((i) => strata[i]!)), [0, 1]);
  assert.deepEqual(
    p.slice(5).map((i) => strata[i]!),
    [0, 0],
  );
});

test('the stratified order differs from the shuffle; without strata selectPrompts is the shuffle', () => {
  const strata = equalStrata(48, 6);
  assert.notDeepEqual(stratifiedPermutation(strata, 0, 0), epochPermutation(48, 0, 0));
  assert.deepEqual(selectPrompts(48, 0, { epoch: 0, cursor: 0 }, 48).indices, epochPermutation(48, 0, 0));
  assert.throws(() => selectPrompts(48, 0, { epoch: 0, cursor: 0 }, 8, strata.slice(1)), /48 rows but 47 strata/);
});

test('selectPrompts with strata covers every row once an epoch, however the run is cut', () => {
  const strata = equalStrata(30, 6);
  for (const perStep of [1, 4, 8, 30]) {
    let at: DataCursor = { epoch: 0, cursor: 0 };
    const seen: number[] = [];
    while (seen.length < strata.length * 3) {
      // a "resume" is calling again from the saved cursor
      const { indices, next } = selectPrompts(strata.length, 5, at, perStep, strata);
      seen.push(...indices);
      at = JSON.parse(JSON.stringify(next));
    }
    for (let e = 0; e < 3; e++)
      assert.deepEqual(
        seen.slice(e * 30, (e + 1) * 30),
        stratifiedPermutation(strata, 5, e),
        `perStep ${perStep}, epoch ${e}`,
      );
  }
});

test("the demo's steps each draw 8 prompts over the six figure kinds, none more than twice", () => {
  const strata = syntheticProblems(128, 0, 'angle_facts').map((p) => p.stratum!);
  let at: DataCursor = { epoch: 0, cursor: 0 };
  for (let step = 0; step < 32; step++) {
    const pick = selectPrompts(128, 0, at, 8, strata);
    const counts = range(6).map((k) => pick.indices.filter((i) => strata[i] === k).length);
    assert.ok(Math.max(...counts) <= 2, `step ${step}: ${counts.join(' ')}`);
    at = pick.next;
  }
});

test('angle-facts rows declare their figure kind; other datasets declare no strata', async () => {
  const problems = syntheticProblems(24, 3, 'angle_facts');
  // each kind has its own answer: the stratum is the kind the answer names
  const answerOf = new Map<number, string>();
  for (const p of problems) {
    assert.ok(p.stratum !== undefined && p.stratum >= 0 && p.stratum < ANGLE_ANSWERS.length);
    assert.equal(answerOf.get(p.stratum) ?? p.answer, p.answer);
    answerOf.set(p.stratum, p.answer);
  }
  assert.equal(answerOf.size, ANGLE_ANSWERS.length);
  assert.equal(
    syntheticProblems(6, 3).some((p) => p.stratum !== undefined),
    false,
  );
  const store = new LocalBlobStore(path.join(mkdtempSync(path.join(os.tmpdir(), 'tempo-rl-strata-')), 'blobs'));
  const angles = DatasetConfig.parse({ synthetic_task: 'angle_facts', synthetic_size: 12, synthetic_seed: 3 });
  const loaded = await loadDataset(angles, 'train', store);
  assert.deepEqual(
    loaded.strata,
    syntheticProblems(12, 3, 'angle_facts').map((p) => p.stratum),
  );
  const arithmetic = DatasetConfig.parse({ synthetic_task: 'arithmetic', synthetic_size: 12 });
  assert.equal((await loadDataset(arithmetic, 'train', store, 'arithmetic')).strata, undefined);
});

test('prompt_order stratified reaches the plan; shuffle leaves the plan as earlier runs recorded it', () => {
  const sets = ['state_dir=/tmp/prompt-order', 'dataset.synthetic_task=angle_facts'];
  const shuffle = initialRunState(loadConfig({ env: {}, sets }), 'r').plan;
  assert.equal('prompt_order' in shuffle, false);
  const stratified = initialRunState(
    loadConfig({ env: {}, sets: [...sets, 'rollout.prompt_order=stratified'] }),
    'r',
  ).plan;
  assert.equal(stratified.prompt_order, 'stratified');
  assert.deepEqual({ ...stratified, prompt_order: undefined }, { ...shuffle, prompt_order: undefined });
  const demo = loadConfig({ env: {}, file: path.join(REPO_ROOT, 'configs/cpu-tiny.yaml'), sets: sets.slice(0, 1) });
  assert.equal(demo.rollout.prompt_order, 'stratified');
});

test('stratified with a dataset that declares no strata is refused, naming the key and the dataset', () => {
  const refused = (sets: string[], dataset: RegExp) =>
    assert.throws(
      () => loadConfig({ env: {}, sets: ['state_dir=/tmp/prompt-order', 'rollout.prompt_order=stratified', ...sets] }),
      (err: Error) => {
        assert.match(
          err.message,
          /rollout\.prompt_order: stratified needs a dataset whose train rows declare a stratum/,
        );
        assert.match(err.message, dataset);
        return true;
      },
    );
  // the geo3k environment's first task, measure, when dataset.synthetic_task is absent
  refused([], /dataset\.kind synthetic with synthetic_task measure declares none/);
  refused(['dataset.kind=jsonl', 'dataset.path=/tmp/x.jsonl'], /dataset\.kind jsonl declares none/);
  refused(['rollout.environment=arithmetic'], /synthetic_task arithmetic declares none/);
  // SFT records keep the shuffle (the warm start's SFT config takes the demo's rollout keys whole)
  const sft = loadConfig({
    env: {},
    sets: ['state_dir=/tmp/prompt-order', 'rollout.prompt_order=stratified', 'algorithm=sft', 'sft.path=/tmp/x.jsonl'],
  });
  assert.equal('prompt_order' in initialRunState(sft, 'r').plan, false);
});
