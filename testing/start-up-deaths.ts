// The certification harness (testing/certify.ts) restarts whatever dies until its run has a result.

/** What the harness reads of a child process that ended. */
export interface Exited {
  exitCode: number | null;
  signalCode: string | null;
}

/** A worker that cannot start (a missing package, a bad environment) would be restarted for ever: the
 *  fifth time in a row that one of a kind exits by itself within 20 s of its start, the run fails,
 *  naming it (a kill point's SIGKILL is not an exit of its own, and a worker that outlived its start
 *  resets the count). */
export class StartUpDeaths {
  private readonly started = new WeakMap<Exited, number>();
  private readonly inARow = new Map<string, number>();
  private readonly since = Date.now();

  restart<C extends Exited>(kind: string, child: C, start: () => C): C {
    const lived = Date.now() - (this.started.get(child) ?? this.since);
    const ownExit = child.exitCode !== null && child.exitCode !== 0;
    const n = ownExit && lived < 20_000 ? (this.inARow.get(kind) ?? 0) + 1 : 0;
    this.inARow.set(kind, n);
    if (n >= 5)
      throw new Error(
        `the ${kind} exited by itself (code ${child.exitCode}) within 20 s of its start ${n} times in a row: it cannot start here (its stderr is above)`,
      );
    const next = start();
    this.started.set(next, Date.now());
    return next;
  }
}
