// The tinylm book's additions to sphinx-book-theme (registered in _config.yml: html_js_files).
// Landmarks: the theme's left sidebar (the book's title and its table of contents) is a plain <div>, so
// screen readers' landmark lists skip its title, and axe-core reports it as content outside any landmark
// (rule `region`). Name it as the complementary landmark it is.
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll(".bd-sidebar-primary").forEach(function (sidebar) {
    if (!sidebar.hasAttribute("role")) {
      sidebar.setAttribute("role", "complementary");
      sidebar.setAttribute("aria-label", "The book's chapters");
    }
  });
});
