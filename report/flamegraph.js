"use strict";
// Interaction for ustack's flame graph: click a box to zoom to it, "Reset
// Zoom" (or a click on "all") to go back; Ctrl-F or "Search" asks for a
// regular expression, paints the matching boxes and shows the share of the
// samples they hold. Everything it needs is in this document.
(function () {
	var svg = document.documentElement;
	var padX = 10, fontSize = 12, fontW = 0.59, boxH = 16, eps = 0.01;
	var matchFill = "rgb(230,0,230)";
	var width = +svg.getAttribute("width");
	var full = width - 2 * padX;
	var kinds = { u: "user", k: "kernel", i: "inlined", j: "JIT", t: "tail call", g: "" };
	var frames = document.getElementById("frames");
	var details = document.getElementById("details");
	var matchedText = document.getElementById("matched");
	var unzoomButton = document.getElementById("unzoom");
	var unsearchButton = document.getElementById("unsearch");
	var boxes = [];
	var byG = new Map();
	var zoomed = null, term = "";

	var gs = frames.children;
	for (var i = 0; i < gs.length; i++) {
		var g = gs[i];
		var rect = g.querySelector("rect"), text = g.querySelector("text");
		var title = g.querySelector("title").textContent;
		var m = /^(.*) \(([\d,]+) samples, [\d.]+%\)$/.exec(title);
		var b = {
			g: g, rect: rect, text: text, title: title,
			name: m ? m[1] : title,
			count: m ? +m[2].replace(/,/g, "") : 0,
			x: +rect.getAttribute("x"), w: +rect.getAttribute("width"),
			y: +rect.getAttribute("y"), fill: rect.getAttribute("fill"),
			kind: kinds[g.classList[0]] || "",
			fallback: +(g.getAttribute("data-fallback") || 0),
			fplost: +(g.getAttribute("data-fplost") || 0)
		};
		boxes.push(b);
		byG.set(g, b);
	}
	var root = boxes[0];
	boxes.forEach(function (b) { b.d = Math.round(Math.abs(b.y - root.y) / boxH); });

	function label(name, w) {
		var fit = Math.floor(w / (fontSize * fontW));
		if (fit < 3) return "";
		return name.length <= fit ? name : name.slice(0, fit - 2) + "..";
	}

	function place(b, x, w) {
		b.rect.setAttribute("x", x.toFixed(3));
		b.rect.setAttribute("width", w.toFixed(3));
		b.text.setAttribute("x", (x + 3).toFixed(2));
		b.text.textContent = label(b.name, w);
	}

	function zoom(z) {
		if (z === root) { unzoom(); return; }
		zoomed = z;
		var ratio = full / z.w;
		boxes.forEach(function (b) {
			b.g.classList.remove("hide", "parent");
			if (b.d < z.d) {
				if (b.x <= z.x + eps && b.x + b.w >= z.x + z.w - eps) {
					place(b, padX, full);
					b.g.classList.add("parent");
				} else {
					b.g.classList.add("hide");
				}
			} else if (b.x >= z.x - eps && b.x + b.w <= z.x + z.w + eps) {
				place(b, padX + (b.x - z.x) * ratio, b.w * ratio);
			} else {
				b.g.classList.add("hide");
			}
		});
		unzoomButton.classList.remove("hide");
	}

	function unzoom() {
		zoomed = null;
		boxes.forEach(function (b) {
			b.g.classList.remove("hide", "parent");
			place(b, b.x, b.w);
		});
		unzoomButton.classList.add("hide");
	}

	function escapeRegExp(s) { return s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"); }

	function search(t) {
		if (!t) { resetSearch(); return 0; }
		var re;
		try { re = new RegExp(t); } catch (e) { re = new RegExp(escapeRegExp(t)); }
		term = t;
		var matches = [];
		boxes.forEach(function (b) {
			if (b !== root && re.test(b.name)) {
				b.rect.setAttribute("fill", matchFill);
				b.g.classList.add("match");
				matches.push(b);
			} else {
				b.rect.setAttribute("fill", b.fill);
				b.g.classList.remove("match");
			}
		});
		// Count each sample once: a match inside another match (recursion,
		// or a caller matching too) adds nothing.
		matches.sort(function (a, b) { return a.x - b.x || a.d - b.d; });
		var samples = 0, end = -Infinity;
		matches.forEach(function (b) {
			if (b.x >= end - eps) {
				samples += b.count;
				end = b.x + b.w;
			}
		});
		var pct = root.count ? 100 * samples / root.count : 0;
		matchedText.textContent = "Matched: " + pct.toFixed(2) + "%";
		unsearchButton.classList.remove("hide");
		return pct;
	}

	function resetSearch() {
		term = "";
		boxes.forEach(function (b) {
			b.rect.setAttribute("fill", b.fill);
			b.g.classList.remove("match");
		});
		matchedText.textContent = " ";
		unsearchButton.classList.add("hide");
	}

	function askSearch() {
		var t = window.prompt("Search for (a regular expression, e.g. ^ext4_):", term);
		if (t !== null) search(t);
	}

	function boxOf(e) {
		var g = e.target.closest ? e.target.closest("#frames > g") : null;
		return g ? byG.get(g) : null;
	}

	frames.addEventListener("click", function (e) {
		var b = boxOf(e);
		if (b) zoom(b);
	});
	frames.addEventListener("mouseover", function (e) {
		var b = boxOf(e);
		if (!b) return;
		var s = b.title;
		if (b.kind) s += " [" + b.kind + "]";
		if (b.fallback) s += ", recovered without CFI (a frame pointer, the link register, the function's code, a stack scan, or the kernel's frame-pointer call chain) in " + b.fallback + " samples";
		if (b.fplost) s += ", lost by a frame-pointer walk in " + b.fplost + " samples";
		details.textContent = s;
	});
	frames.addEventListener("mouseout", function () { details.textContent = " "; });
	unzoomButton.addEventListener("click", unzoom);
	document.getElementById("search").addEventListener("click", askSearch);
	unsearchButton.addEventListener("click", resetSearch);
	window.addEventListener("keydown", function (e) {
		if ((e.ctrlKey || e.metaKey) && (e.key === "f" || e.key === "F")) {
			e.preventDefault();
			askSearch();
		} else if (e.key === "Escape") {
			resetSearch();
		}
	});
	var q = /[?&]s=([^&]*)/.exec(window.location.search);
	if (q) search(decodeURIComponent(q[1]));

	// A flame graph taller than the window opens at its base, where the
	// wide boxes are (an icicle graph's base is its top).
	if (svg.getAttribute("data-inverted") !== "true") {
		window.scrollTo(0, svg.getBoundingClientRect().height);
	}

	window.flamegraph = { search: search, resetSearch: resetSearch, unzoom: unzoom };
})();
