"""What the browser tests share: the system's headless Chromium driven by Selenium (skipped, with how to
install it, when either is missing), and screenshots kept in tests/output/screens after each run."""

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

SCREENS = Path(__file__).resolve().parent / "output" / "screens"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
webdriver = pytest.importorskip(
    "selenium.webdriver", reason="selenium is not installed (pip install selenium)"
)
if not (CHROMIUM and CHROMEDRIVER):
    pytest.skip(
        "headless Chromium is not installed: ./install.sh --browser (apt-get install chromium chromium-driver)",
        allow_module_level=True,
    )
from selenium.webdriver.common.by import By  # noqa: E402,F401 (after the skips: the browser tests import these)
from selenium.webdriver.support import expected_conditions as EC  # noqa: E402,F401
from selenium.webdriver.support.select import Select  # noqa: E402,F401
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402,F401


def chrome(width: int, height: int) -> Iterator:
    """A headless Chromium of that window size, quit at the end (a fixture's body)."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(CHROMEDRIVER))
    driver.implicitly_wait(0)
    yield driver
    driver.quit()


def keep_screens(folder: Path) -> Iterator[Path]:
    """`folder` for a module's screenshots, copied to SCREENS at the end (a fixture's body)."""
    yield folder
    SCREENS.mkdir(parents=True, exist_ok=True)
    for png in folder.glob("*.png"):
        shutil.copy(png, SCREENS / png.name)
