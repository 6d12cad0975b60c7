// graphgate console: progressive touches only; every form works without this file.
"use strict";
document.addEventListener("submit", (event) => {
  const button = event.submitter;
  const question = button && button.dataset.confirm;
  if (question && !window.confirm(question)) event.preventDefault();
});
for (const field of document.querySelectorAll("[data-select-all]")) {
  field.addEventListener("focus", () => field.select());
}
