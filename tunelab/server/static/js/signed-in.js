/**
 * "Signed in as NAME (role)" in the header: asks the server who the token or key is
 * (GET /api/me) and hands the answer to rights.js, which the panels ask before offering
 * an action. A server that cannot say (an older one, the network) leaves every control
 * on, as before: the server refuses what the caller may not do either way.
 */

import { api } from "./api.js";
import { setSignedIn } from "./rights.js";

const MAY = {
  admin: "may do everything",
  member: "may start runs and manage its own runs; others' runs are read only",
  viewer: "may only read: starting or changing anything needs a member or admin key",
};

/** Learn who is signed in and show it; resolves to false when the token was refused. */
export async function signIn() {
  const label = document.getElementById("signed-in");
  let me = null;
  try {
    me = await api.me();
  } catch (err) {
    if (err.status === 401) return false;
  }
  setSignedIn(me);
  label.hidden = !me;
  if (me) {
    label.textContent = `Signed in as ${me.name} (${me.role})`;
    label.title = me.owner ? `The key '${me.name}' ${MAY[me.role] || ""}` : `The server's own token ${MAY.admin}`;
    label.dataset.role = me.role;
  }
  return true;
}
