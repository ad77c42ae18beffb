"""Package metadata comes from settings.ini (nbdev 2); dependencies are pinned in requirements.txt."""
from configparser import ConfigParser
from pathlib import Path
import setuptools

cfg = ConfigParser(delimiters=['=']); cfg.read(Path(__file__).parent / 'settings.ini')
c = cfg['DEFAULT']
reqs = [l.split('#')[0].strip() for l in (Path(__file__).parent / 'requirements.txt').read_text().splitlines()]
setuptools.setup(
    name=c['lib_name'], version=c['version'], description=c['description'], author=c['author'],
    license='MIT', python_requires=f">={c['min_python']}", packages=setuptools.find_packages(include=['kgqa_nb', 'kgqa_nb.*']),
    include_package_data=True, install_requires=['torch==2.13.0'] + [r for r in reqs if r and not r.startswith(('pytest', 'hypothesis'))],
    entry_points={'console_scripts': [s.strip() for s in c['console_scripts'].split()], 'nbdev': [f"{c['lib_path']}={c['lib_path']}._modidx:d"]},
    zip_safe=False)
