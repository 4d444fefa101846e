// The truth list's user filter: suggests usernames (users with truths) as the operator types.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  for (const form of document.querySelectorAll("form.iris-user-filter")) {
    const input = form.querySelector("input[name=user]");
    const list = document.getElementById(input.getAttribute("list"));
    let timer = null;
    input.addEventListener("input", () => {
      clearTimeout(timer);
      timer = setTimeout(async () => {
        const url = form.dataset.autocompleteUrl + "?term=" + encodeURIComponent(input.value);
        const response = await fetch(url, {credentials: "same-origin"});
        if (!response.ok) return;
        const data = await response.json();
        list.replaceChildren(...data.results.map((name) => Object.assign(document.createElement("option"), {value: name})));
      }, 150);
    });
  }
});
