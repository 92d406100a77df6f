// The theme a user picked on this browser ("dark" or "light"), else the system's: set
// before the page paints, so a dark page never flashes light.
(function () {
  var picked = null;
  try { picked = localStorage.getItem("corral-theme"); } catch (e) { /* storage off */ }
  if (picked === "dark" || picked === "light") document.documentElement.dataset.theme = picked;
})();
