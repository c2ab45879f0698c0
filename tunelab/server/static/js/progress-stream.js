/**
 * One run's progress stream for one view: at most one connection at a time, opened with a
 * single-use stream ticket (POST /api/stream-tickets) so the API token never travels in a
 * URL, and after a lost connection opened again by this code, not by EventSource.
 *
 * Why not EventSource's own reconnects: they would offer the used ticket again (refused),
 * and they retry at the server's fixed `retry:` pace with no end, for every open view at
 * once, which is how a run ending and queued runs being cancelled once made a burst of
 * dozens of aborted stream requests. Here a lost connection waits a backoff that doubles
 * with every failure in a row (random jitter within the upper half, capped), and a stream
 * that delivers anything starts the count again. Each connection asks for the steps after
 * the last one the view holds (`last_event_id`), so a reconnect leaves no gap.
 */

import { api } from "./api.js";

export const BACKOFF_MS = { first: 1000, max: 30_000 };

/** The wait before reconnect number `failures` + 1: in [ceiling / 2, ceiling], ceiling doubling to max. */
export function backoffMs(failures, random = Math.random) {
  const ceiling = Math.min(BACKOFF_MS.max, BACKOFF_MS.first * 2 ** failures);
  return ceiling / 2 + (random() * ceiling) / 2;
}

export class ProgressStream {
  /**
   * @param runId the run whose stream (/api/runs/{id}/progress) this follows
   * @param lastStep () => the last step the view holds, or null (asked at each connection)
   * @param on {progress(event), status(event), end(event), lost(err), state(text)}: steps,
   *   stage changes, the run's end (`complete`, or `error` with its message), a ticket the
   *   server refused (401: the page asks for the token; 404: the run is gone), and a line
   *   for the person saying how the connection stands ("" when live)
   */
  constructor(runId, lastStep, on) {
    this.runId = runId;
    this.lastStep = lastStep;
    this.on = on;
    this.source = null;
    this.timer = null;
    this.failures = 0;
    this.closed = false;
  }

  open() {
    this.#connect();
    return this;
  }

  close() {
    this.closed = true;
    clearTimeout(this.timer);
    if (this.source) this.source.close();
    this.source = null;
  }

  async #connect() {
    let url;
    try {
      url = (await api.streamTicket(this.runId)).url;
    } catch (err) {
      if (this.closed) return;
      if (err.status === 401 || err.status === 404) {
        this.close();
        this.on.lost(err);
      } else {
        this.#retry();
      }
      return;
    }
    if (this.closed) return;
    const step = this.lastStep();
    if (Number.isInteger(step)) url += `&last_event_id=${encodeURIComponent(`${this.runId}:${step}`)}`;
    const source = new EventSource(url);
    this.source = source;
    const delivered = () => { this.failures = 0; };
    source.addEventListener("open", () => this.on.state(""));
    source.addEventListener("heartbeat", delivered);
    source.addEventListener("progress", (e) => { delivered(); this.on.progress(JSON.parse(e.data)); });
    source.addEventListener("status", (e) => { delivered(); this.on.status(JSON.parse(e.data)); });
    source.addEventListener("complete", (e) => this.#end(source, JSON.parse(e.data)));
    source.addEventListener("error", (e) => {
      // A named `error` event (with data) is the run failing; a bare one is the connection.
      if (e.data) {
        this.#end(source, JSON.parse(e.data));
      } else if (source === this.source) {
        source.close();
        this.source = null;
        this.#retry();
      } else {
        source.close(); // a connection this view let go of never reconnects by itself (its ticket is spent)
      }
    });
  }

  #retry() {
    if (this.closed) return;
    const wait = backoffMs(this.failures);
    this.failures += 1;
    this.on.state(`Live updates interrupted; reconnecting in ${Math.ceil(wait / 1000)} s…`);
    this.timer = setTimeout(() => { if (!this.closed) this.#connect(); }, wait);
  }

  /** The run ended: the server closes the stream now; close it here first, for good. */
  #end(source, event) {
    if (source !== this.source) return;
    this.close();
    this.on.state("");
    this.on.end(event);
  }
}
