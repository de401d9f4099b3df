#!/usr/bin/python3
"""Screenshots a map page (e.g. site_viewer.html) in headless Debian chromium via selenium.

Usage: render_site.py PAGE_URL OUT.png [TIMEOUT_SECONDS]
  Loads PAGE_URL in an 800x600 window, polls document.title every 0.1 s until it is "idle" or
  starts with "error" (the page sets it), saves a screenshot to OUT.png (also on error or timeout,
  when the browser still answers), and prints the final title (or "timeout: ..." / "error: ...").
  TIMEOUT_SECONDS (default 60) bounds the whole run; a watchdog kills chromedriver and chromium
  (their own process group) 30 s after it, so this never hangs.
Needs: Debian chromium, chromium-driver (/usr/bin/chromedriver), python3-selenium; run with
  Debian's /usr/bin/python3 (the shebang). GL is software (SwiftShader through ANGLE).
Exit: 0 = title "idle"; 1 = error title, timeout, or browser failure; 2 = bad usage.
"""
import os
import signal
import sys
import threading
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def main():
    if len(sys.argv) not in (3, 4):
        print(__doc__, file=sys.stderr)
        return 2
    url, out = sys.argv[1], sys.argv[2]
    try:
        timeout = float(sys.argv[3]) if len(sys.argv) == 4 else 60.0
    except ValueError:
        print(__doc__, file=sys.stderr)
        return 2
    deadline = time.monotonic() + timeout

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--use-angle=swiftshader",
                "--enable-unsafe-swiftshader", "--window-size=800,600",
                "--disable-dev-shm-usage", "--no-first-run", "--hide-scrollbars"):
        opts.add_argument(arg)
    # chromedriver (and the chromium it starts) in a session of their own: the watchdog and the
    # final cleanup kill that whole process group.
    service = Service(CHROMEDRIVER, popen_kw={"start_new_session": True})

    def kill_group():
        proc = getattr(service, "process", None)
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def watchdog():
        kill_group()
        print("timeout: watchdog killed the browser", flush=True)
        os._exit(1)

    def on_signal(signum, _frame):
        raise SystemExit(128 + signum)  # runs the finally below: the browser is shut down

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, on_signal)
    timer = threading.Timer(timeout + 30, watchdog)
    timer.daemon = True
    timer.start()
    driver = None
    try:
        driver = webdriver.Chrome(service=service, options=opts)
        # --window-size includes (invisible) browser UI: pin the viewport itself to 800x600.
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                               {"width": 800, "height": 600, "deviceScaleFactor": 1, "mobile": False})
        driver.set_page_load_timeout(max(1.0, deadline - time.monotonic()))
        driver.get(url)
        title = ""
        while True:
            title = driver.title or ""
            if title == "idle" or title.startswith("error"):
                break
            if time.monotonic() >= deadline:
                title = "timeout after %gs (title %r)" % (timeout, title)
                break
            time.sleep(0.1)
        driver.save_screenshot(out)
        print(title, flush=True)
        return 0 if title == "idle" else 1
    except Exception as e:  # WebDriverException, TimeoutException, connection errors
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print("error: %s" % msg, flush=True)
        if driver is not None:
            try:
                driver.save_screenshot(out)
            except Exception:
                pass
        return 1
    finally:
        if driver is not None:
            try:
                driver.quit()
            except Exception:
                pass
        kill_group()  # whatever chromium processes are left
        try:
            service.stop()
        except Exception:
            pass
        timer.cancel()


if __name__ == "__main__":
    sys.exit(main())
