/**
 * Light and dark themes. The page follows the system's `prefers-color-scheme` until the
 * person picks one with the toggle; that choice is remembered. Charts listen for the
 * `themechange` event to redraw in the new colours.
 */

const THEME_KEY = "tunelab.theme";
const darkQuery = matchMedia("(prefers-color-scheme: dark)");

function effectiveTheme() {
  return localStorage.getItem(THEME_KEY) || (darkQuery.matches ? "dark" : "light");
}

function apply(button) {
  const theme = effectiveTheme();
  document.documentElement.dataset.theme = theme;
  const next = theme === "dark" ? "light" : "dark";
  button.setAttribute("aria-pressed", String(theme === "dark"));
  button.title = `Switch to the ${next} theme`;
  document.dispatchEvent(new Event("themechange"));
}

export function setUpTheme(button) {
  apply(button);
  button.addEventListener("click", () => {
    localStorage.setItem(THEME_KEY, effectiveTheme() === "dark" ? "light" : "dark");
    apply(button);
  });
  darkQuery.addEventListener("change", () => {
    if (!localStorage.getItem(THEME_KEY)) apply(button);
  });
}
