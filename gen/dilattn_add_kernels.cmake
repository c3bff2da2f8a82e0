# dilattn_add_kernels.cmake - build-time kernel generation for a user's target.
#
#   dilattn_add_kernels(<target> CONFIGS a.json b.json [ARCHS sm_80 sm_90] [NAME bundle]
#                       [TARGET host|cuda]
#                       [MMA auto|sync|wgmma|wgmma-overlap|wgmma-ws|wgmma-ws-p2|wgmma-ws-tma])
#
# Runs `dilattn gen --compile --bundle NAME` at build time (TARGET cuda, the default
# when ARCHS are given, compiles a cubin per arch with NVRTC; TARGET host compiles host
# shared objects with the C compiler), adds the generated NAME_bundle.c (the compiled
# kernels as data) to <target>, puts NAME.h (one typed entry point per config: spec,
# plan, run) on its include path, and links dilattn::dilattn. At run time NAME_<config>_plan
# registers the bundle with the context, so the plan starts without a compiler
# (DILATTN_DISABLE_JIT=1 proves it). MMA auto, the default for TARGET cuda, builds per arch
# the kernel a plan takes there by default, and on sm_90 its fallback too (`gen --mma auto`:
# wgmma-ws-tma and wgmma-ws where the wgmma paths serve the config, mma.sync elsewhere), and
# the typed _plan names no instruction. MMA sync (the default before auto) or a wgmma variant
# builds that instruction alone and _plan asks for it; a wgmma variant takes sm_90 only
# (compiled as sm_90a), the default ARCHS then. Refused at configure time: an unknown
# TARGET or MMA, ARCHS or MMA with TARGET host, a misspelled keyword (an upper-case word
# that is no file), a NAME used twice in one folder.
function(dilattn_add_kernels target)
  cmake_parse_arguments(DK "" "NAME;TARGET;MMA" "CONFIGS;ARCHS" ${ARGN})
  set(where "dilattn_add_kernels(${target})")
  if(DK_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "${where}: unknown arguments ${DK_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT DK_CONFIGS)
    message(FATAL_ERROR "${where}: CONFIGS is required")
  endif()
  if(NOT DK_NAME) # (a C identifier: my-engine's is my_engine_kernels)
    string(MAKE_C_IDENTIFIER "${target}_kernels" DK_NAME)
  endif()
  if(NOT DK_TARGET)
    if(DK_ARCHS)
      set(DK_TARGET cuda)
    else()
      set(DK_TARGET host)
    endif()
  endif()
  # what `dilattn gen` refuses at build time, said at configure time: a TARGET or MMA it
  # does not know, ARCHS or MMA with the host target (dropped without a word before)
  if(NOT DK_TARGET MATCHES "^(host|cuda)$")
    message(FATAL_ERROR "${where}: TARGET ${DK_TARGET}: expected host or cuda")
  endif()
  if(DK_MMA AND NOT DK_MMA MATCHES "^(auto|sync|wgmma|wgmma-overlap|wgmma-ws|wgmma-ws-p2|wgmma-ws-tma)$")
    message(FATAL_ERROR "${where}: MMA ${DK_MMA}: expected auto, sync, wgmma, wgmma-overlap, wgmma-ws, wgmma-ws-p2 "
                        "or wgmma-ws-tma")
  endif()
  if(DK_TARGET STREQUAL "host" AND (DK_ARCHS OR DK_MMA))
    message(FATAL_ERROR "${where}: ARCHS and MMA are for TARGET cuda; TARGET host builds host shared objects")
  endif()
  # one bundle of a NAME a folder: its three files would be two rules' outputs
  get_property(names DIRECTORY PROPERTY DILATTN_BUNDLE_NAMES)
  if(DK_NAME IN_LIST names)
    message(FATAL_ERROR "${where}: NAME ${DK_NAME} is another dilattn_add_kernels' of this folder: give each its own")
  endif()
  set_property(DIRECTORY APPEND PROPERTY DILATTN_BUNDLE_NAMES ${DK_NAME})
  set(out ${CMAKE_CURRENT_BINARY_DIR}/${DK_NAME})
  set(configs "")
  foreach(c ${DK_CONFIGS})
    get_filename_component(abs ${c} ABSOLUTE)
    # (a misspelled keyword, ARCH for ARCHS, is read as a config: said now, not as "No rule
    # to make target .../ARCH" at build time. Only a word like a keyword: a config that a
    # rule declared later generates is not there yet, and is fine)
    if(NOT EXISTS ${abs} AND c MATCHES "^[A-Z][A-Z0-9_]*$")
      message(FATAL_ERROR "${where}: ${c} is not a keyword (CONFIGS, ARCHS, NAME, TARGET, MMA) nor a config file")
    endif()
    list(APPEND configs ${abs})
  endforeach()
  set(arch_args "")
  if(DK_TARGET STREQUAL "cuda")
    if(NOT DK_ARCHS)
      if(DK_MMA MATCHES "^wgmma")
        set(DK_ARCHS sm_90)
      else()
        set(DK_ARCHS sm_80 sm_90)
      endif()
    endif()
    if(NOT DK_MMA)
      set(DK_MMA auto)
    endif()
    string(REPLACE ";" "," arch_list "${DK_ARCHS}")
    set(arch_args --arch ${arch_list})
    if(DK_MMA)
      list(APPEND arch_args --mma ${DK_MMA})
    endif()
  endif()
  add_custom_command(
    OUTPUT ${out}/${DK_NAME}_bundle.c ${out}/${DK_NAME}.h ${out}/manifest.json
    COMMAND ${CMAKE_COMMAND} -E make_directory ${out}
    COMMAND dilattn::cli gen ${configs} --target ${DK_TARGET} ${arch_args} --compile --bundle ${DK_NAME} -o ${out}
    DEPENDS ${configs} $<TARGET_FILE:dilattn::cli> $<TARGET_FILE:dilattn::dilattn> # (another dilattn: rebuilt)
    COMMENT "dilattn: generating and compiling kernels for ${target} (${DK_NAME}, ${DK_TARGET})"
    VERBATIM)
  target_sources(${target} PRIVATE ${out}/${DK_NAME}_bundle.c)
  # a project without C compiles the bundle as C++ or CUDA (it is written for both)
  get_property(languages GLOBAL PROPERTY ENABLED_LANGUAGES)
  if(NOT "C" IN_LIST languages)
    if("CXX" IN_LIST languages)
      set_source_files_properties(${out}/${DK_NAME}_bundle.c PROPERTIES LANGUAGE CXX)
    elseif("CUDA" IN_LIST languages)
      set_source_files_properties(${out}/${DK_NAME}_bundle.c PROPERTIES LANGUAGE CUDA)
    else()
      message(FATAL_ERROR "dilattn_add_kernels(${target}): the bundle is C, C++ or CUDA source, and this project "
                          "enables none of them (project(... LANGUAGES C) or enable_language(C))")
    endif()
  endif()
  target_include_directories(${target} PRIVATE ${out})
  # dilattn::dilattn linked as target_link_libraries(PRIVATE) would, without its keyword
  # signature: a target the plain signature already links keeps working
  set_property(TARGET ${target} APPEND PROPERTY LINK_LIBRARIES dilattn::dilattn)
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "STATIC_LIBRARY" OR type STREQUAL "OBJECT_LIBRARY")
    set_property(TARGET ${target} APPEND PROPERTY INTERFACE_LINK_LIBRARIES $<LINK_ONLY:dilattn::dilattn>)
  endif()
endfunction()
