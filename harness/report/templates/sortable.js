/* Click-to-sort for every table.sortable: click a header to sort ascending, again for descending.
   Cells carry data-sort (a number or text; "" = missing, always last). No dependencies. */
(function () {
  "use strict";
  function compare(x, y) {
    var nx = Number(x), ny = Number(y);
    if (x !== "" && y !== "" && !isNaN(nx) && !isNaN(ny)) { return nx - ny; }
    return String(x).localeCompare(String(y));
  }
  function sortBy(table, th, col) {
    var asc = th.getAttribute("aria-sort") !== "ascending";
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", asc ? "ascending" : "descending");
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = a.cells[col].getAttribute("data-sort"), y = b.cells[col].getAttribute("data-sort");
      if (x === "" || y === "") { return (x === "") - (y === ""); }
      return asc ? compare(x, y) : compare(y, x);
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }
  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
      th.addEventListener("click", function () { sortBy(table, th, col); });
    });
  });
})();
