// A rollout worker as a child process (SIGKILL-able) for the episode durability tests. Its engine is
// the scripted double. Scenario geo3k (the default): turn 1 answers a wrong tool call; turn 2 either
// hangs (mode "block", after writing the marker file) or answers \boxed{60}. Scenario arithmetic:
// turn 1 calls the calculator, turn 2 hangs or calls it on `ans`, a turn that sees 44 submits it.
import { writeFileSync } from 'node:fs';
import { loadConfig } from '../config/load.js';
import { LocalBlobStore } from '../stores/blobstore.js';
import { stateLayout } from '../stores/layout.js';
import { createRolloutWorker } from '../rollout/worker.js';
import { decode, EngineDouble } from './episode-engine-double.js';

const [stateDir, port, mode, marker, scenario = 'geo3k'] = process.argv.slice(2) as [
  string,
  string,
  'block' | 'normal',
  string,
  ('geo3k' | 'arithmetic')?,
];
const env = { ...process.env };
delete env.TEMPORAL_ADDRESS;
const cfg = loadConfig({ env, sets: [`state_dir=${stateDir}`, `server.port=${port}`] });

class ChildEngine extends EngineDouble {
  override async generate(req: Parameters<EngineDouble['generate']>[0]) {
    const seen = decode(req.token_ids);
    const secondTurn =
      scenario === 'arithmetic' ? seen.includes('kept as ans') && !seen.includes('= 44') : seen.includes('incorrect');
    if (secondTurn && mode === 'block') {
      writeFileSync(marker, String(process.pid));
      await new Promise(() => {}); // in turn 2 until SIGKILL
    }
    return super.generate(req);
  }
}
const call = (name: string, args: Record<string, string>) => ({
  text: `<tool_call>${JSON.stringify({ name, arguments: args })}</tool_call>`,
});
const geo3k = (seen: string) =>
  seen.includes('incorrect') ? { text: 'then it is \\boxed{60}' } : call('calc_score', { answer: '7' });
const arithmetic = (seen: string) =>
  seen.includes('= 44')
    ? call('submit', { answer: '44' })
    : seen.includes('kept as ans')
      ? call('calculator', { expression: 'ans - 25' })
      : call('calculator', { expression: '(14 + 9) * 3' });
const engine = new ChildEngine((req) => (scenario === 'arithmetic' ? arithmetic : geo3k)(decode(req.token_ids)));
const worker = await createRolloutWorker(cfg, {
  cfg,
  store: new LocalBlobStore(stateLayout(stateDir).blobs),
  engines: () => engine,
  imageProcessor: null,
});
process.stdout.write('worker-ready\n');
await worker.run();
