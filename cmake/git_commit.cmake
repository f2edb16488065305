# Writes OUT, a source file defining mxlab::detail::git_commit(), from the checkout at SOURCE_DIR: the
# abbreviated commit, with "-dirty" when tracked files differ from it, or "unknown" outside a checkout.
# Run at every build (not only at configure time), so results never name a commit the binary was not built
# from; the file is rewritten only when the text changes, so an unchanged commit rebuilds nothing.
set(commit "unknown")
if(GIT_EXECUTABLE AND EXISTS "${SOURCE_DIR}/.git")
  execute_process(COMMAND "${GIT_EXECUTABLE}" rev-parse --short=12 HEAD WORKING_DIRECTORY "${SOURCE_DIR}"
                  OUTPUT_VARIABLE head OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
  if(rc EQUAL 0 AND head)
    set(commit "${head}")
    execute_process(COMMAND "${GIT_EXECUTABLE}" status --porcelain --untracked-files=no
                    WORKING_DIRECTORY "${SOURCE_DIR}" OUTPUT_VARIABLE changes ERROR_QUIET RESULT_VARIABLE rc)
    if(rc EQUAL 0 AND NOT changes STREQUAL "")
      string(APPEND commit "-dirty")
    endif()
  endif()
endif()
set(text "// Generated at build time by cmake/git_commit.cmake.\nnamespace mxlab::detail {\nconst char* git_commit();\nconst char* git_commit() { return \"${commit}\"; }\n}  // namespace mxlab::detail\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
else()
  set(old "")
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
