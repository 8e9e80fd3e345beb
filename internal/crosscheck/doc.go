// Package crosscheck holds no code: its tests check that the generated
// dashboards (package dashboards), the generated rules (package alerts) and
// docs/runbooks.md point at each other correctly. Neither package can
// import the other's output without a cycle of responsibilities, so the
// agreement between the three is proven here.
package crosscheck
