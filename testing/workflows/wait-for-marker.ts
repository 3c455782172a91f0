// A test-only workflow (bundled by the tests' workers, never the production one) for the server's
// durability test: it waits on an activity that blocks until a marker file appears, so the Temporal
// server can be killed while it is in flight.
import { proxyActivities } from '@temporalio/workflow';
import type { TestRolloutActivities } from '../test-contract.js';

const { waitForFile } = proxyActivities<TestRolloutActivities>({
  startToCloseTimeout: '10 minutes',
  heartbeatTimeout: '20 seconds',
  retry: { initialInterval: '1 second', maximumInterval: '5 seconds' },
});

export async function waitForMarker(input: { marker: string }): Promise<{ before: string; after: string }> {
  const before = await waitForFile({ path: `${input.marker}.first`, label: 'first' });
  const after = await waitForFile({ path: input.marker, label: 'second' });
  return { before, after };
}
