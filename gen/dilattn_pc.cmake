# dilattn_pc.cmake - writes dilattn.pc from dilattn.pc.in. The file is installed in
# <libdir>/pkgconfig and finds the prefix from its own folder (${pcfiledir}), so an install
# tree can move: as many ".." as libdir has parts (lib: two; Debian's lib/x86_64-linux-gnu:
# three). An absolute libdir or includedir is written as given.
# In CMakeLists.txt: dilattn_write_pc(...); as a script (tests/consumer/run.sh):
#   cmake -DPC_IN=... -DPC_OUT=... -DLIBDIR=... -DINCLUDEDIR=... -DPREFIX=... -DVERSION=... -P dilattn_pc.cmake
function(dilattn_write_pc in out libdir includedir prefix version)
  if(IS_ABSOLUTE "${libdir}")
    set(DA_PC_PREFIX "${prefix}")
    set(DA_PC_LIBDIR "${libdir}")
  else()
    file(RELATIVE_PATH up "/p/${libdir}/pkgconfig" "/p")
    string(REGEX REPLACE "/$" "" up "${up}")
    set(DA_PC_PREFIX "\${pcfiledir}/${up}")
    set(DA_PC_LIBDIR "\${prefix}/${libdir}")
  endif()
  if(IS_ABSOLUTE "${includedir}")
    set(DA_PC_INCLUDEDIR "${includedir}")
  else()
    set(DA_PC_INCLUDEDIR "\${prefix}/${includedir}")
  endif()
  set(DA_PC_VERSION "${version}")
  configure_file(${in} ${out} @ONLY)
endfunction()

if(CMAKE_SCRIPT_MODE_FILE AND PC_OUT)
  dilattn_write_pc("${PC_IN}" "${PC_OUT}" "${LIBDIR}" "${INCLUDEDIR}" "${PREFIX}" "${VERSION}")
endif()
