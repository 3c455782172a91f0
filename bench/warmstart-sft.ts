// How the warm start learns (prints numbers; not a test): the demo's warm-start SFT run, uncached, with
// a held-out eval every --eval-every steps, so one run shows where the tool-call format and the
// figure → answer rule are learnt. Every checkpoint is kept: each is a model directory that
// `bench/warmstart-learning.ts --warm DIR` can start GRPO from.
//
//   node --import tsx bench/warmstart-sft.ts [--steps 100] [--eval-every 10] [--first-correct P|uniform] [--habit 180,360|none] [--habit-share P] [--habit-recheck P] [--recheck P] [--eval-temperature T] [--set k=v]…
import path from 'node:path';
import { parseArgs } from 'node:util';
import { withSets } from '../config/load.js';
import { startOrContinueRun } from '../client/run-client.js';
import { waitForRun, warmStartConfig, writeWarmStartTranscripts } from '../client/warm-start.js';
import { readStepRecords } from '../activities/run.js';
import { runDir } from '../stores/layout.js';
import { startDemoRunFixture } from '../testing/run.js';

const { values } = parseArgs({
  options: {
    steps: { type: 'string', default: '100' },
    'eval-every': { type: 'string', default: '10' },
    'first-correct': { type: 'string' },
    habit: { type: 'string' },
    'habit-share': { type: 'string' },
    'habit-recheck': { type: 'string' },
    recheck: { type: 'string' },
    'eval-temperature': { type: 'string' },
    set: { type: 'string', multiple: true, default: [] },
  },
});
const fx = await startDemoRunFixture([]);
try {
  const runId = `sft-bench-${Date.now()}`;
  const transcripts = path.join(fx.cfg.state_dir, 'sft-bench', runId, 'transcripts.jsonl');
  const sftCfg = withSets(warmStartConfig(fx.cfg, transcripts), [
    `run.steps=${values.steps}`,
    `run.eval_interval=${values['eval-every']}`,
    'run.eval_prompts=32',
    'run.keep_checkpoints=0',
    ...(values['eval-temperature'] !== undefined ? [`run.eval_temperature=${values['eval-temperature']}`] : []),
    ...values.set,
  ]);
  await writeWarmStartTranscripts(fx.cfg, sftCfg, transcripts, {
    // Unset flags: the warm start's own transcripts (client/warm-start.ts).
    ...(values['first-correct'] !== undefined
      ? { first_correct: values['first-correct'] === 'uniform' ? undefined : Number(values['first-correct']) }
      : {}),
    ...(values.habit !== undefined ? { habit: values.habit === 'none' ? undefined : values.habit.split(',') } : {}),
    ...(values['habit-share'] !== undefined ? { habit_share: Number(values['habit-share']) } : {}),
    ...(values['habit-recheck'] !== undefined ? { habit_recheck: Number(values['habit-recheck']) } : {}),
    ...(values.recheck !== undefined ? { recheck: Number(values.recheck) } : {}),
  });
  const t0 = Date.now();
  await startOrContinueRun(fx.client, sftCfg, runId);
  const result = await waitForRun(fx.client, runId);
  process.stdout.write(
    `run ${runId} ${result.status} in ${((Date.now() - t0) / 1000).toFixed(0)} s; checkpoints under ${path.join(runDir(sftCfg, runId), 'checkpoints')}\n`,
  );
  for (const { step, metrics: m } of await readStepRecords(runDir(sftCfg, runId))) {
    const f = (k: string) => (m[k] ?? Number.NaN).toFixed(2);
    process.stdout.write(
      `step ${step + 1}: step ${f('perf/step_time')} s, train activity ${f('perf/train_time')} s, trainer ${f('perf/train_seconds')} s, ` +
        `${m['train/n_response_tokens'] ?? 0} of ${m['train/n_tokens'] ?? 0} tokens trained\n`,
    );
    if (m['eval/reward'] === undefined) continue;
    process.stdout.write(
      `step ${step + 1}: nll ${f('sft/nll')}  eval reward ${f('eval/reward')}  first answer right ${f('eval/first_answer_correct')}  ` +
        `first-turn calls ${f('eval/first_turn_tool_call_rate')}  parseable ${f('eval/tool_call_rate')}  recovery ${f('eval/recovery_rate')}\n`,
    );
  }
} finally {
  await fx.close();
}
