// A rollout worker as a child process (SIGKILL-able) for the episode durability test. Its engine is
// the scripted double: turn 1 answers a wrong tool call; turn 2 either hangs (mode "block", after
// writing the marker file) or answers \boxed{60}.
import { writeFileSync } from 'node:fs';
import { loadConfig } from '../../../config/load.js';
import { LocalBlobStore } from '../../../lib/blobstore.js';
import { stateLayout } from '../../../lib/paths.js';
import { createRolloutWorker } from '../../../workers/rollout-worker.js';
import { decode, EngineDouble } from './episode-engine-double.js';

const [stateDir, port, mode, marker] = process.argv.slice(2) as [string, string, 'block' | 'normal', string];
const env = { ...process.env };
delete env.TEMPORAL_ADDRESS;
const cfg = loadConfig({ env, sets: [`state_dir=${stateDir}`, `server.port=${port}`] });

class ChildEngine extends EngineDouble {
  override async generate(req: Parameters<EngineDouble['generate']>[0]) {
    const secondTurn = decode(req.token_ids).includes('incorrect');
    if (secondTurn && mode === 'block') {
      writeFileSync(marker, String(process.pid));
      await new Promise(() => {}); // in turn 2 until SIGKILL
    }
    return super.generate(req);
  }
}
const engine = new ChildEngine((req) =>
  decode(req.token_ids).includes('incorrect')
    ? { text: 'then it is \\boxed{60}' }
    : { text: '<tool_call>{"name":"calc_score","arguments":{"answer":"7"}}</tool_call>' },
);
const worker = await createRolloutWorker(cfg, { cfg, store: new LocalBlobStore(stateLayout(stateDir).blobs), engines: () => engine, imageProcessor: null });
process.stdout.write('worker-ready\n');
await worker.run();
