/**
 * Short messages about what just happened ("run 3 renamed", "stop refused: ..."),
 * announced to screen readers through a polite live region and cleared after a while.
 * A notice about something still under way ("Stopping at the next step…") is `sticky`:
 * it stays exactly as long as that lasts, and whoever watches it removes it.
 */

const SHOW_MS = 6000;

/** Show `message`; returns a function that removes it (the only way a sticky one goes). */
export function notify(message, kind = "info", { sticky = false } = {}) {
  const area = document.getElementById("notices");
  const item = document.createElement("p");
  item.className = `notice notice-${kind}`;
  item.textContent = message;
  area.append(item);
  const dismiss = () => item.remove();
  if (!sticky) setTimeout(dismiss, kind === "error" ? SHOW_MS * 2 : SHOW_MS);
  return dismiss;
}
