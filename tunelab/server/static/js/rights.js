/**
 * What the signed-in caller may do, so the page offers only that: each `cannot…`
 * answers null when the caller may, or the reason it may not (shown on hover over the
 * disabled control). The rules mirror tunelab/server/roles.py — admin: everything;
 * member: start work, and manage its own runs; viewer: read — and the server still
 * decides every request. Until the page knows who is signed in (GET /api/me), nothing is
 * refused here.
 */

let me = null; // {name, role, owner} from GET /api/me

export function setSignedIn(answer) {
  me = answer;
}

export function signedIn() {
  return me;
}

const isAdmin = () => !me || me.role === "admin";
const readOnly = () => `the viewer key '${me.name}' only reads; this needs a member or admin key`;
const whose = (owner) => (owner ? `the key '${owner}'` : "the server's own token (owner 'local')");

/** Starting work that touches no one's run: a run, a dataset preview, a chat, an evaluation. */
export function cannotUse() {
  return me && me.role === "viewer" ? readOnly() : null;
}

/** Stop, cancel, rename, delete, resume or export `run` (anything with its `id` and `owner`); null: unknown yet. */
export function cannotManage(run) {
  if (isAdmin()) return null;
  if (me.role === "viewer") return readOnly();
  if (!run) return "finding out whose run this is…";
  if ((run.owner ?? null) === me.owner) return null;
  return `run #${run.id} belongs to ${whose(run.owner)}; the member key '${me.name}' manages only its own runs`;
}

/** Set a queued run's priority. */
export function cannotPrioritise() {
  return isAdmin() ? null : "only an admin sets priorities";
}

/** Swap queued `run` with its neighbour `other`: a member moves its own runs among its own only. */
export function cannotSwap(run, other) {
  const own = cannotManage(run);
  if (own || isAdmin() || (other.owner ?? null) === me.owner) return own;
  return `run #${other.id} belongs to ${whose(other.owner)}; only an admin moves runs past another key's runs`;
}

/** Enable `node` unless `reason` (or `busy`) says otherwise; the reason shows on hover. */
export function guard(node, reason, busy = false) {
  node.disabled = busy || Boolean(reason);
  if (reason) node.title = reason;
  else node.removeAttribute("title");
  return node;
}
