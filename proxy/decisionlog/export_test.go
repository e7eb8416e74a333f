package decisionlog

// TimeLayout is timeLayout, for the tests that cannot be in this package
// (they write lines through the proxy's packages, which import it).
const TimeLayout = timeLayout

// LineAllow is lineAllow, a connection line as the proxy writes it.
const LineAllow = lineAllow
