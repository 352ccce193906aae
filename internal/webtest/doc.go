// Package webtest holds the browser tests of the web client (package web): real Parley
// servers on loopback ports, driven through headless Chromium with chromedp. The tests skip,
// saying why, when no Chromium is installed (.ci/run installs Debian's chromium package).
// Screenshots of the main views go to $PARLEY_WEB_SCREENSHOTS or a temporary folder, logged
// by the test.
package webtest
