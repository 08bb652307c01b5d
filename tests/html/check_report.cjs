// Loads a `kiln inspect --html` report in headless Chromium (Debian's, through playwright-core)
// and checks that it renders: no console errors and no uncaught exceptions, the kernel graph
// and the memory timeline drawn as SVG, one table row per kernel, and sorting by a column works.
// Usage: NODE_PATH=/opt/kiln/npm/node_modules node check_report.cjs REPORT.html KERNELS [SCREENSHOT.png]
// CommonJS, so that NODE_PATH finds playwright-core where scripts/setup.sh installs it.
const { chromium } = require("playwright-core");
const { pathToFileURL } = require("node:url");

async function main() {
  const [report, kernelCount, screenshot] = process.argv.slice(2);
  const failures = [];
  const browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    // No network here: keep Chromium from trying to reach its services.
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1300, height: 1000 } });
    page.on("console", (message) => {
      if (message.type() === "error" || message.type() === "warning")
        failures.push(`console ${message.type()}: ${message.text()}`);
    });
    page.on("pageerror", (error) => failures.push(`uncaught: ${error.message}`));
    page.on("requestfailed", (request) => failures.push(`request failed: ${request.url()}`));
    await page.goto(pathToFileURL(report).href, { waitUntil: "load" });

    const graphNodes = await page.locator(".graph svg g.node").count();
    if (graphNodes < Number(kernelCount)) failures.push(`kernel graph has ${graphNodes} nodes`);
    const bars = await page.locator("svg.timeline rect.value").count();
    if (bars < 1) failures.push("memory timeline has no bars");
    const rows = await page.locator("table.kernels tbody tr").count();
    if (rows !== Number(kernelCount)) failures.push(`kernel table has ${rows} rows, expected ${kernelCount}`);

    // Sort by FLOPs (column 6): the first row then has the fewest.
    await page.locator("table.kernels th").nth(5).click();
    const flops = await page.locator("table.kernels tbody tr td:nth-child(6)").evaluateAll(
        (cells) => cells.map((cell) => Number(cell.dataset.v)));
    if (flops.some((value, i) => i > 0 && value < flops[i - 1])) failures.push(`not sorted: ${flops}`);
    if (screenshot) await page.screenshot({ path: screenshot, fullPage: true });
    console.log(`${report}: ${graphNodes} graph nodes, ${bars} timeline bars, ${rows} kernel rows`);
  } finally {
    await browser.close();
  }
  if (failures.length) {
    console.error(failures.join("\n"));
    process.exit(1);
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
