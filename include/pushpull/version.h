// The version of pushpull this program runs with: the library's, which every binary's
// --version prints too. Semantic versioning: MAJOR.MINOR.PATCH.
#pragma once

namespace pushpull {

// "0.1.0": the release of the library linked in (the tree's VERSION file).
const char* Version();

}  // namespace pushpull
