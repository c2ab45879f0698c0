/**
 * Short messages about what just happened ("run 3 renamed", "stop refused: ..."),
 * announced to screen readers through a polite live region and cleared after a while.
 */

const SHOW_MS = 6000;

export function notify(message, kind = "info") {
  const area = document.getElementById("notices");
  const item = document.createElement("p");
  item.className = `notice notice-${kind}`;
  item.textContent = message;
  area.append(item);
  setTimeout(() => item.remove(), kind === "error" ? SHOW_MS * 2 : SHOW_MS);
}
