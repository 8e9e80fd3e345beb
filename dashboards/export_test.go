package dashboards

// HeadingAnchor is headingAnchor, for the linter test's check that panel
// links go to sections of docs/runbooks.md.
var HeadingAnchor = headingAnchor
