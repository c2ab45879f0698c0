// Building page elements: the two helpers every panel that draws its own markup uses.

/** A new element with an optional class and text (set as text, never parsed as HTML). */
export function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

/** A button with an accessible name (icon-like labels say what they do to a screen reader). */
export function button(label, className, accessibleName, onClick) {
  const node = el("button", className, label);
  node.type = "button";
  node.setAttribute("aria-label", accessibleName);
  node.addEventListener("click", onClick);
  return node;
}
